// Host-emulation transport (shm_transport.cpp): control over a Unix stream socket at `path`
// (its directory 0700 and this user's, the socket 0600; a peer must be this user and open with
// HELLO carrying `token`), rows in the POSIX shared memory the trainer created and names.
#pragma once
#include <memory>
#include <string>

#include "transport.hpp"

namespace sni {
namespace agent {

// Listens at `path` (throws std::runtime_error when it cannot); `token`: the 32 bytes a
// trainer's hello must carry; `once`: stop after the first trainer has gone.
std::unique_ptr<Transport> make_shm_transport(const std::string& path, const std::string& token, bool once);

}  // namespace agent
}  // namespace sni
