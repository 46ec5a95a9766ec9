// libFuzzer target over the agent's message parser (dpu_agent/csrc/protocol.hpp): whole
// requests (header + payload), the Comch frame reassembler, and the token/hello path.
// Built by tests/dpu_agent/test_fuzz.py with clang -fsanitize=fuzzer,address.
#include <cstddef>
#include <cstdint>
#include <string>

#include "dpu_agent/csrc/protocol.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace sni::proto;
    Header h;
    std::string err;
    parse_request(data, size, &h, &err);
    if (size >= sizeof(Header) && parse_request_header(data, sizeof(Header), &h, &err)) {
        const uint8_t* p = data + sizeof(Header);
        const size_t n = size - sizeof(Header);
        AddTable a;
        parse_add_table(p, n, &a, &err);
        uint64_t c;
        parse_observe(p, n, &c, &err);
    }
    // the same bytes cut into frames: byte 0 of each 1..64-byte piece says more/last
    Reassembler r;
    size_t off = 0;
    while (off < size) {
        const size_t len = 1 + (data[off] % 64);
        const size_t take = len < size - off ? len : size - off;
        if (r.feed(data + off, take, &err) != Reassembler::kNeedMore) r.reset();
        off += take;
    }
    return 0;
}
