// The agent's side of a transport, as the serving loop (serve.hpp) drives it.
//
// Control: whole messages (proto::Header + payload) in order, each request answered by one
// reply. Data: per table five regions of the trainer's memory (fresh rows, ids of a partial
// sync, served rows, their weights, drift) that the agent reads and writes. Implementations,
// each its own translation unit behind a factory: make_shm_transport (shm_transport.hpp: Unix
// socket + POSIX shared memory, host emulation) and make_doca_transport (doca_transport.hpp:
// Comch + DMA, BlueField DPU, DOCA loaded with dlopen).
#pragma once
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "../protocol.hpp"

namespace sni {
namespace agent {

// Set by the agent's SIGTERM/SIGINT handler (main.cpp): transports stop waiting and serving.
extern volatile std::sig_atomic_t g_stop;

enum Region : int { kFresh = 0, kIds = 1, kServed = 2, kWeight = 3, kDrift = 4 };

// Bytes of each region of a table of rows x dim (as the trainer allocates them, at least 1).
inline uint64_t region_bytes(Region r, uint64_t rows, uint64_t dim) {
    uint64_t b = 0;
    switch (r) {
    case kFresh: case kServed: b = rows * dim * 4; break;
    case kIds: b = rows * 8; break;
    case kWeight: case kDrift: b = rows * 4; break;
    }
    return b ? b : 1;
}

// Failure of a transport operation on behalf of one request (reported to the trainer).
class TransportError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

inline void log(const std::string& msg) {
    std::fprintf(stderr, "sni-agent: %s\n", msg.c_str());
    std::fflush(stderr);
}

class Transport {
public:
    enum Recv { kMessage, kClosed, kMalformed };
    virtual ~Transport() = default;
    // Wait for the next trainer (accept, authenticate); false: stop serving.
    virtual bool next_peer() = 0;
    // Next request of the current trainer; kMalformed: logged, the connection must be closed.
    virtual Recv recv(proto::Header* h, std::vector<uint8_t>* payload) = 0;
    // Send one reply; false when the trainer has gone.
    virtual bool send(const proto::Header& h, const uint8_t* payload) = 0;
    // Map the regions the trainer announced for a table (throws TransportError).
    virtual void attach(uint32_t table, uint64_t rows, uint32_t dim, const proto::Blob* regions) = 0;
    // Copy the first `bytes` of a region into dst / src into the start of a region (throws).
    virtual void read(uint32_t table, Region r, void* dst, uint64_t bytes) = 0;
    virtual void write(uint32_t table, Region r, const void* src, uint64_t bytes) = 0;
    // Release the current trainer's regions and connection.
    virtual void end_peer() = 0;
};

}  // namespace agent
}  // namespace sni
