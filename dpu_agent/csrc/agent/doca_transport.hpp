// BlueField transport (doca_transport.cpp): control over a DOCA Comch server, rows by DOCA DMA
// between agent-local staging buffers and the trainer's exported mmaps. DOCA is loaded at run
// time (doca_api.hpp), so one binary runs with the real SDK or the tests' simulated one.
#pragma once
#include <memory>
#include <string>

#include "transport.hpp"

namespace sni {
namespace agent {

// Opens the device at PCI address `pci` and its network representor (`rep_pci`, or the first
// one when empty), starts a Comch server named `name` and a DMA context; DOCA's libraries come
// from `lib_dir`, else $DOCA_LIB_DIR, else the SDK's default. Throws std::runtime_error (one
// such transport per process). Serves one trainer: after it has gone, next_peer() says stop.
std::unique_ptr<Transport> make_doca_transport(const std::string& pci, const std::string& name,
                                               const std::string& rep_pci, const std::string& lib_dir);

}  // namespace agent
}  // namespace sni
