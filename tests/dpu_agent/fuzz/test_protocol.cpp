// Unit test of the agent's message decoder (dpu_agent/csrc/protocol.hpp), beside its fuzz
// target: well-formed messages, built byte by byte in the wire format that dpu_agent/protocol.py
// packs, decode to their fields; truncated, oversized and garbage ones are refused with the
// decoder's error. Built and run by tests/dpu_agent/test_protocol_cpp.py (g++).
//
//   test_protocol            run the checks; exit 1 if any fails (each failure is printed)
//   test_protocol --decode   read messages from stdin (u32 length + bytes each) and print one
//                            line per message: its decoded fields or "refused: <error>"
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "dpu_agent/csrc/protocol.hpp"

using namespace sni::proto;

namespace {

int g_checks = 0, g_failed = 0;

void check(bool ok, const char* what, const char* file, int line) {
    ++g_checks;
    if (!ok) {
        ++g_failed;
        std::fprintf(stderr, "%s:%d: check failed: %s\n", file, line, what);
    }
}
#define CHECK(cond) check((cond), #cond, __FILE__, __LINE__)
#define CHECK_EQ(a, b) check((a) == (b), #a " == " #b, __FILE__, __LINE__)

// `err` names the fault: it contains `want`.
void check_error(bool ok, const std::string& err, const std::string& want, const char* file, int line) {
    ++g_checks;
    if (ok || err.find(want) == std::string::npos) {
        ++g_failed;
        std::fprintf(stderr, "%s:%d: expected a refusal with \"%s\", got %s\n", file, line, want.c_str(),
                     ok ? "acceptance" : ("the error \"" + err + "\"").c_str());
    }
}
#define CHECK_REFUSED(call, err, want) check_error((call), (err), (want), __FILE__, __LINE__)

// Little-endian bytes, field by field (independent of the Header struct's layout).
struct Bytes {
    std::vector<uint8_t> b;
    Bytes& u8(uint8_t v) { b.push_back(v); return *this; }
    Bytes& u16(uint16_t v) { return le(v, 2); }
    Bytes& u32(uint32_t v) { return le(v, 4); }
    Bytes& u64(uint64_t v) { return le(v, 8); }
    Bytes& f64(double v) { uint64_t u; std::memcpy(&u, &v, 8); return le(u, 8); }
    Bytes& raw(const std::string& s) { b.insert(b.end(), s.begin(), s.end()); return *this; }
    Bytes& raw(const std::vector<uint8_t>& v) { b.insert(b.end(), v.begin(), v.end()); return *this; }
    Bytes& le(uint64_t v, int n) {
        for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
        return *this;
    }
    const uint8_t* data() const { return b.data(); }
    size_t size() const { return b.size(); }
};

// magic "SNIA" | u16 version | u16 op | u32 table | u32 flags | f64 step | u32 length | u32 status
Bytes header(uint16_t op, uint32_t table, uint32_t flags, double step, uint32_t length, uint32_t status = kOk,
             uint32_t magic = kMagic, uint16_t version = kVersion) {
    Bytes h;
    h.u32(magic).u16(version).u16(op).u32(table).u32(flags).f64(step).u32(length).u32(status);
    return h;
}

Bytes message(uint16_t op, uint32_t table, uint32_t flags, double step, const Bytes& payload) {
    return header(op, table, flags, step, static_cast<uint32_t>(payload.size())).raw(payload.b);
}

struct AddSpec {
    uint64_t rows = 6;
    uint32_t dim = 3, kind = 2, window = 4, nregions = kNumRegions;
    double beta = 0.2, lam = 0.3;
    std::vector<uint8_t> sampled = {1, 0, 1, 0, 1, 0};
    std::vector<std::string> regions = {"/sni-1-00112233", "/sni-1-44556677", "/a", "/b", "/c"};
};

// The add_table payload: fixed part (u64 num_rows, u32 dim, kind, window, regions, f64 beta,
// lam), the sampled mask, then per region u32 length + bytes.
Bytes add_payload(const AddSpec& s) {
    Bytes p;
    p.u64(s.rows).u32(s.dim).u32(s.kind).u32(s.window).u32(s.nregions).f64(s.beta).f64(s.lam).raw(s.sampled);
    for (const std::string& r : s.regions) p.u32(static_cast<uint32_t>(r.size())).raw(r);
    return p;
}

bool header_of(const Bytes& m, Header* h, std::string* err) { return parse_request_header(m.data(), m.size(), h, err); }

bool add_of(const Bytes& p, AddTable* a, std::string* err) { return parse_add_table(p.data(), p.size(), a, err); }

bool request_of(const Bytes& m, std::string* err) {
    Header h;
    return parse_request(m.data(), m.size(), &h, err);
}

// ------------------------------------------------------------------------------------ header
void test_header_layout() {
    const Header h = make_header(kServe, 7, kPreview, 2.5, 0, kOk);
    Bytes want = header(kServe, 7, kPreview, 2.5, 0);
    CHECK_EQ(sizeof h, want.size());
    CHECK(std::memcmp(&h, want.data(), sizeof h) == 0);
    CHECK(std::memcmp(want.data(), "SNIA", 4) == 0);
    CHECK_EQ(std::string(op_name(kAddTable)), "add_table");
    CHECK_EQ(std::string(op_name(kClose)), "close");
    CHECK_EQ(std::string(op_name(0)), "?");
    CHECK_EQ(std::string(op_name(kOpEnd)), "?");
}

void test_well_formed_headers() {
    Header h;
    std::string err;
    CHECK(header_of(header(kObserve, 3, kPartial, 4.5, 8), &h, &err));
    CHECK_EQ(h.magic, kMagic);
    CHECK_EQ(h.version, kVersion);
    CHECK_EQ(h.op, kObserve);
    CHECK_EQ(h.table, 3u);
    CHECK_EQ(h.flags, static_cast<uint32_t>(kPartial));
    CHECK_EQ(h.step, 4.5);
    CHECK_EQ(h.length, 8u);
    CHECK_EQ(h.status, static_cast<uint32_t>(kOk));
    CHECK(header_of(header(kHello, 0, 0, 0.0, kTokenBytes), &h, &err));
    CHECK(header_of(header(kServe, 0xFFFFFFFFu, kPreview, -1.0, 0), &h, &err) && h.table == 0xFFFFFFFFu);
    CHECK(header_of(header(kServe, 1, 0, 1.0, 0), &h, &err) && h.flags == 0);
    CHECK(header_of(header(kDrift, 1, 0, 1.0, 0), &h, &err));
    CHECK(header_of(header(kStats, 0, 0, 0.0, 0), &h, &err));
    CHECK(header_of(header(kClose, 0, 0, 0.0, 0), &h, &err));
    CHECK(header_of(header(kAddTable, 1, 0, 0.0, kAddFixed), &h, &err));
    CHECK(header_of(header(kAddTable, 1, 0, 0.0, kMaxPayload), &h, &err));
    // only the ops that take a step need a finite one
    CHECK(header_of(header(kStats, 0, 0, std::numeric_limits<double>::quiet_NaN(), 0), &h, &err));
}

void test_malformed_headers() {
    Header h;
    std::string err;
    const Bytes good = header(kServe, 1, 0, 1.0, 0);
    for (size_t n : {size_t(0), size_t(1), size_t(31), size_t(33)}) {
        err.clear();
        Bytes m = good;
        m.b.resize(n, 0);
        CHECK_REFUSED(header_of(m, &h, &err), err, "truncated header (" + std::to_string(n) + " bytes)");
    }
    CHECK_REFUSED(header_of(header(kServe, 1, 0, 1.0, 0, kOk, 0x41494E54u), &h, &err), err, "bad magic");
    CHECK_REFUSED(header_of(header(kServe, 1, 0, 1.0, 0, kOk, kMagic, 2), &h, &err), err, "protocol version 2");
    CHECK_REFUSED(header_of(header(0, 1, 0, 1.0, 0), &h, &err), err, "unknown operation 0");
    CHECK_REFUSED(header_of(header(kOpEnd, 1, 0, 1.0, 0), &h, &err), err, "unknown operation 8");
    CHECK_REFUSED(header_of(header(0xFFFF, 1, 0, 1.0, 0), &h, &err), err, "unknown operation 65535");
    CHECK_REFUSED(header_of(header(kServe, 1, 0, 1.0, 0, kError), &h, &err), err, "a request must have status 0");
    // flags: kPartial only on observe, kPreview only on serve
    CHECK_REFUSED(header_of(header(kServe, 1, kPartial, 1.0, 0), &h, &err), err, "flags 1 invalid for serve");
    CHECK_REFUSED(header_of(header(kObserve, 1, kPreview, 1.0, 8), &h, &err), err, "flags 2 invalid for observe");
    CHECK_REFUSED(header_of(header(kDrift, 1, kPartial, 1.0, 0), &h, &err), err, "flags 1 invalid for drift");
    CHECK_REFUSED(header_of(header(kServe, 1, 0x80000000u, 1.0, 0), &h, &err), err, "invalid for serve");
    // oversized payloads, refused before anything is read or allocated
    CHECK_REFUSED(header_of(header(kHello, 0, 0, 0.0, kTokenBytes + 1), &h, &err), err,
                  "hello payload of 33 bytes exceeds the limit of 32");
    CHECK_REFUSED(header_of(header(kObserve, 0, 0, 0.0, 9), &h, &err), err, "exceeds the limit of 8");
    CHECK_REFUSED(header_of(header(kServe, 0, 0, 0.0, 1), &h, &err), err, "serve payload of 1 bytes exceeds the limit of 0");
    CHECK_REFUSED(header_of(header(kStats, 0, 0, 0.0, 0xFFFFFFFFu), &h, &err), err, "exceeds the limit of 0");
    CHECK_REFUSED(header_of(header(kAddTable, 0, 0, 0.0, kMaxPayload + 1), &h, &err), err,
                  "exceeds the limit of " + std::to_string(kMaxPayload));
    CHECK_REFUSED(header_of(header(kAddTable, 0, 0, 0.0, 0xFFFFFFFFu), &h, &err), err, "exceeds the limit");
    // payloads of the wrong size
    CHECK_REFUSED(header_of(header(kHello, 0, 0, 0.0, kTokenBytes - 1), &h, &err), err, "hello payload of 31 bytes has the wrong size");
    CHECK_REFUSED(header_of(header(kObserve, 0, 0, 0.0, 7), &h, &err), err, "observe payload of 7 bytes has the wrong size");
    CHECK_REFUSED(header_of(header(kAddTable, 0, 0, 0.0, kAddFixed - 1), &h, &err), err, "has the wrong size");
    // steps
    const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
    CHECK_REFUSED(header_of(header(kObserve, 0, 0, nan, 8), &h, &err), err, "observe needs a finite step");
    CHECK_REFUSED(header_of(header(kServe, 0, 0, inf, 0), &h, &err), err, "serve needs a finite step");
    CHECK_REFUSED(header_of(header(kDrift, 0, 0, -inf, 0), &h, &err), err, "drift needs a finite step");
}

// ------------------------------------------------------------------------------------ add_table
void test_add_table_decodes_its_fields() {
    AddSpec s;
    const Bytes p = add_payload(s);
    AddTable a;
    std::string err;
    CHECK(add_of(p, &a, &err));
    CHECK(err.empty());
    CHECK_EQ(a.num_rows, 6u);
    CHECK_EQ(a.dim, 3u);
    CHECK_EQ(a.kind, 2u);
    CHECK_EQ(a.window, 4u);
    CHECK_EQ(a.beta, 0.2);
    CHECK_EQ(a.lam, 0.3);
    CHECK(a.sampled == p.data() + kAddFixed);  // points into the payload, nothing copied
    CHECK(std::memcmp(a.sampled, s.sampled.data(), 6) == 0);
    for (uint32_t k = 0; k < kNumRegions; ++k) {
        CHECK_EQ(a.regions[k].size, s.regions[k].size());
        CHECK(a.regions[k].data >= p.data() && a.regions[k].data + a.regions[k].size <= p.data() + p.size());
        CHECK_EQ(std::string(reinterpret_cast<const char*>(a.regions[k].data), a.regions[k].size), s.regions[k]);
    }
    // the whole message, as a request
    CHECK(request_of(message(kAddTable, 7, 0, 0.0, p), &err));

    // the limits themselves are allowed
    AddSpec edge;
    edge.rows = 0;
    edge.sampled.clear();
    edge.dim = kMaxDim;
    edge.kind = kNumKinds - 1;
    edge.window = kMaxWindow;
    edge.regions[0] = std::string(kMaxBlob, 'x');
    CHECK(add_of(add_payload(edge), &a, &err));
    CHECK_EQ(a.num_rows, 0u);
    CHECK_EQ(a.dim, kMaxDim);
    CHECK_EQ(a.regions[0].size, kMaxBlob);
    AddSpec one;
    one.dim = 1;
    one.kind = 0;
    one.window = 1;
    one.beta = -0.0;
    CHECK(add_of(add_payload(one), &a, &err) && a.dim == 1 && a.window == 1 && a.kind == 0);
}

void test_add_table_refusals() {
    AddTable a;
    std::string err;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    auto refused = [&](const AddSpec& s, const std::string& want, int line) {
        err.clear();
        check_error(add_of(add_payload(s), &a, &err), err, want, __FILE__, line);
    };
    AddSpec s;
    s.rows = kMaxRows + 1;
    refused(s, "rows exceed the limit of " + std::to_string(kMaxRows), __LINE__);
    s = AddSpec(); s.dim = 0;
    refused(s, "dim 0 outside [1, 65536]", __LINE__);
    s = AddSpec(); s.dim = kMaxDim + 1;
    refused(s, "dim 65537 outside", __LINE__);
    s = AddSpec(); s.rows = kMaxRows; s.dim = 1024;  // 2^36 cells: refused before the mask is read
    refused(s, "rows x dim exceeds the limit", __LINE__);
    s = AddSpec(); s.kind = kNumKinds;
    refused(s, "unknown predictor kind " + std::to_string(kNumKinds), __LINE__);
    s = AddSpec(); s.window = 0;
    refused(s, "window 0 outside [1, 4096]", __LINE__);
    s = AddSpec(); s.window = kMaxWindow + 1;
    refused(s, "window 4097 outside", __LINE__);
    s = AddSpec(); s.beta = nan;
    refused(s, "beta and lam must be finite", __LINE__);
    s = AddSpec(); s.lam = -std::numeric_limits<double>::infinity();
    refused(s, "beta and lam must be finite", __LINE__);
    s = AddSpec(); s.nregions = 4;
    refused(s, "4 regions (expected 5)", __LINE__);
    s = AddSpec(); s.rows = 7;  // the fixed part, then a mask of 6 of the 7 rows and nothing more
    s.regions.clear();
    refused(s, "sampled mask truncated", __LINE__);
    s = AddSpec(); s.sampled[4] = 2;
    refused(s, "sampled mask byte 4 is not 0 or 1", __LINE__);
    s = AddSpec(); s.regions[2] = "";
    refused(s, "region 2 descriptor of 0 bytes", __LINE__);
    s = AddSpec(); s.regions[1] = std::string(kMaxBlob + 1, 'y');
    refused(s, "region 1 descriptor of 65537 bytes", __LINE__);
    s = AddSpec(); s.regions.pop_back();
    refused(s, "region 4 truncated", __LINE__);

    // cut short anywhere: refused, never read past the end
    const Bytes p = add_payload(AddSpec());
    for (size_t n = 0; n < p.size(); ++n) {
        Bytes cut = p;
        cut.b.resize(n);
        err.clear();
        CHECK_REFUSED(add_of(cut, &a, &err), err, "add_table");
    }
    Bytes fixed = p;
    fixed.b.resize(kAddFixed - 1);
    CHECK_REFUSED(add_of(fixed, &a, &err), err, "add_table payload shorter than its fixed part");
    Bytes blob = p;
    blob.b.resize(p.size() - 1);  // the last region's bytes are one short
    CHECK_REFUSED(add_of(blob, &a, &err), err, "region 4 truncated");
    Bytes extra = p;
    extra.u8(0).u8(0);
    CHECK_REFUSED(add_of(extra, &a, &err), err, "add_table: 2 trailing bytes");
}

// ------------------------------------------------------------------------------------ observe
void test_observe() {
    uint64_t count = 0;
    std::string err;
    Bytes p;
    p.u64(12345);
    CHECK(parse_observe(p.data(), p.size(), &count, &err) && count == 12345);
    Bytes maxed;
    maxed.u64(kMaxRows);
    CHECK(parse_observe(maxed.data(), maxed.size(), &count, &err) && count == kMaxRows);
    Bytes over;
    over.u64(kMaxRows + 1);
    CHECK_REFUSED(parse_observe(over.data(), over.size(), &count, &err), err, "exceeds the row limit");
    Bytes huge;
    huge.u64(~0ull);
    CHECK_REFUSED(parse_observe(huge.data(), huge.size(), &count, &err), err, "exceeds the row limit");
    CHECK_REFUSED(parse_observe(p.data(), 7, &count, &err), err, "observe payload must be 8 bytes");
    CHECK_REFUSED(parse_observe(p.data(), 0, &count, &err), err, "observe payload must be 8 bytes");
    CHECK(request_of(message(kObserve, 2, kPartial, 3.0, p), &err));
    CHECK_REFUSED(request_of(message(kObserve, 2, 0, 3.0, over), &err), err, "exceeds the row limit");
}

// ------------------------------------------------------------------------------------ whole requests
void test_whole_requests() {
    std::string err;
    Bytes token;
    token.raw(std::string(kTokenBytes, 'k'));
    CHECK(request_of(message(kHello, 0, 0, 0.0, token), &err));
    CHECK(request_of(message(kServe, 1, kPreview, 4.0, Bytes()), &err));
    CHECK(request_of(message(kDrift, 1, 0, 2.0, Bytes()), &err));
    CHECK(request_of(message(kStats, 0, 0, 0.0, Bytes()), &err));
    CHECK(request_of(message(kClose, 0, 0, 0.0, Bytes()), &err));

    Bytes m = message(kHello, 0, 0, 0.0, token);
    m.b.resize(31);
    CHECK_REFUSED(request_of(m, &err), err, "truncated header");
    m = message(kHello, 0, 0, 0.0, token);
    m.b.pop_back();
    CHECK_REFUSED(request_of(m, &err), err, "payload length does not match the header");
    m = message(kServe, 1, 0, 1.0, Bytes());
    m.u8(0);
    CHECK_REFUSED(request_of(m, &err), err, "payload length does not match the header");
    // a payload's fault is the payload decoder's error
    AddSpec s;
    s.kind = 9;
    CHECK_REFUSED(request_of(message(kAddTable, 1, 0, 0.0, add_payload(s)), &err), err, "unknown predictor kind 9");
    // the header's fault comes first
    m = message(kServe, 1, 0, 1.0, Bytes());
    m.b[0] = 'X';
    CHECK_REFUSED(request_of(m, &err), err, "bad magic");
}

void test_garbage() {
    // deterministic junk (xorshift): never accepted unless it happens to carry the magic
    uint64_t x = 0x9E3779B97F4A7C15ull;
    std::string err;
    int accepted = 0;
    for (int i = 0; i < 20000; ++i) {
        Bytes m;
        const size_t n = static_cast<size_t>(i % 97);
        for (size_t k = 0; k < n; ++k) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            m.u8(static_cast<uint8_t>(x));
        }
        err.clear();
        if (request_of(m, &err)) ++accepted;
        else CHECK(!err.empty());
    }
    CHECK_EQ(accepted, 0);
    Bytes zeros;
    zeros.b.assign(64, 0);
    CHECK_REFUSED(request_of(zeros, &err), err, "bad magic");
    Bytes ones;
    ones.b.assign(64, 0xFF);
    CHECK_REFUSED(request_of(ones, &err), err, "bad magic");
}

// ------------------------------------------------------------------------------------ Comch frames
Reassembler::Result feed(Reassembler& r, uint8_t marker, const uint8_t* p, size_t n, std::string* err) {
    std::vector<uint8_t> f(1, marker);
    f.insert(f.end(), p, p + n);
    return r.feed(f.data(), f.size(), err);
}

void test_reassembler() {
    std::string err;
    const Bytes m = message(kAddTable, 5, 0, 0.0, add_payload(AddSpec()));
    for (size_t piece : {m.size(), size_t(1), size_t(7), size_t(31), size_t(32), size_t(33)}) {
        Reassembler r;
        Reassembler::Result res = Reassembler::kNeedMore;
        for (size_t off = 0; off < m.size(); off += piece) {
            const size_t n = std::min(piece, m.size() - off);
            res = feed(r, off + n == m.size() ? 0 : 1, m.data() + off, n, &err);
            if (off + n < m.size()) CHECK_EQ(res, Reassembler::kNeedMore);
        }
        CHECK_EQ(res, Reassembler::kDone);
        CHECK_EQ(r.header().op, kAddTable);
        CHECK_EQ(r.header().table, 5u);
        CHECK_EQ(r.header().length, m.size() - sizeof(Header));
        CHECK(std::memcmp(r.payload(), m.data() + sizeof(Header), m.size() - sizeof(Header)) == 0);
    }
    {  // reusable after reset
        Reassembler r;
        const Bytes a = message(kStats, 0, 0, 0.0, Bytes()), b = message(kDrift, 9, 0, 1.5, Bytes());
        CHECK_EQ(feed(r, 0, a.data(), a.size(), &err), Reassembler::kDone);
        r.reset();
        CHECK_EQ(feed(r, 0, b.data(), b.size(), &err), Reassembler::kDone);
        CHECK(r.header().op == kDrift && r.header().table == 9 && r.header().step == 1.5);
    }
    {  // bad markers, empty frames
        Reassembler r;
        CHECK_EQ(r.feed(nullptr, 0, &err), Reassembler::kBad);
        CHECK(err == "bad frame marker");
        r.reset();
        err.clear();
        CHECK_EQ(feed(r, 2, m.data(), m.size(), &err), Reassembler::kBad);
        CHECK(err == "bad frame marker");
    }
    {  // an oversized header is refused as soon as the header is complete, before its payload
        Reassembler r;
        const Bytes big = header(kAddTable, 0, 0, 0.0, 0xFFFFFFF0u);
        CHECK_EQ(feed(r, 1, big.data(), 20, &err), Reassembler::kNeedMore);
        CHECK_EQ(feed(r, 1, big.data() + 20, 12, &err), Reassembler::kBad);
        CHECK(err.find("exceeds the limit") != std::string::npos);
    }
    {  // garbage header
        Reassembler r;
        Bytes junk;
        junk.b.assign(40, 0xAB);
        CHECK_EQ(feed(r, 0, junk.data(), junk.size(), &err), Reassembler::kBad);
        CHECK(err.find("bad magic") != std::string::npos);
    }
    {  // more bytes than the header says
        Reassembler r;
        Bytes longer = message(kServe, 1, 0, 1.0, Bytes());
        longer.u8(0);
        CHECK_EQ(feed(r, 0, longer.data(), longer.size(), &err), Reassembler::kBad);
        CHECK(err == "frames longer than the header says");
    }
    {  // the last frame comes too early: the header, or the payload, is short
        Reassembler r;
        CHECK_EQ(feed(r, 0, m.data(), 20, &err), Reassembler::kBad);
        CHECK(err == "message shorter than its header says");
        r.reset();
        CHECK_EQ(feed(r, 0, m.data(), m.size() - 1, &err), Reassembler::kBad);
        CHECK(err == "message shorter than its header says");
    }
    {  // the largest message a header allows, then one byte more: refused, nothing more buffered
        Reassembler r;
        const Bytes hb = header(kAddTable, 0, 0, 0.0, kMaxPayload);
        CHECK_EQ(feed(r, 1, hb.data(), hb.size(), &err), Reassembler::kNeedMore);
        const std::vector<uint8_t> zeros(1u << 20, 0);
        uint64_t left = kMaxPayload;
        while (left > 0) {
            const size_t n = static_cast<size_t>(std::min<uint64_t>(left, zeros.size()));
            CHECK_EQ(feed(r, 1, zeros.data(), n, &err), Reassembler::kNeedMore);
            left -= n;
        }
        CHECK_EQ(feed(r, 0, zeros.data(), 1, &err), Reassembler::kBad);
        CHECK(err == "message exceeds the size limit");
    }
}

// ------------------------------------------------------------------------------------ --decode
std::string hex(const uint8_t* p, size_t n) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; ++i) { s += digits[p[i] >> 4]; s += digits[p[i] & 15]; }
    return s;
}

std::string num(double v) {
    if (std::isnan(v)) return "nan";  // printf may say -nan
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

// One line: the fields of a request as dpu_agent.protocol.decode_request names them.
std::string describe(const std::vector<uint8_t>& m) {
    Header h;
    std::string err;
    if (!parse_request(m.data(), m.size(), &h, &err)) return "refused: " + err;
    std::string s = std::string("op=") + op_name(h.op) + " table=" + std::to_string(h.table) + " step=" + num(h.step);
    const uint8_t* p = m.data() + sizeof(Header);
    if (h.op == kHello) s += " token=" + hex(p, h.length);
    if (h.op == kObserve) {
        uint64_t count = 0;
        parse_observe(p, h.length, &count, &err);
        s += " count=" + std::to_string(count) + " partial=" + ((h.flags & kPartial) ? "1" : "0");
    }
    if (h.op == kServe) s += std::string(" preview=") + ((h.flags & kPreview) ? "1" : "0");
    if (h.op == kAddTable) {
        AddTable a;
        parse_add_table(p, h.length, &a, &err);
        s += " num_rows=" + std::to_string(a.num_rows) + " dim=" + std::to_string(a.dim) + " kind=" +
             std::to_string(a.kind) + " window=" + std::to_string(a.window) + " beta=" + num(a.beta) +
             " lam=" + num(a.lam) + " sampled=" + hex(a.sampled, static_cast<size_t>(a.num_rows)) + " regions=";
        for (uint32_t k = 0; k < kNumRegions; ++k) s += (k ? "," : "") + hex(a.regions[k].data, a.regions[k].size);
    }
    return s;
}

int decode_stdin() {
    std::vector<uint8_t> in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    size_t off = 0;
    while (off + 4 <= in.size()) {
        uint32_t n = 0;
        std::memcpy(&n, in.data() + off, 4);
        off += 4;
        if (n > in.size() - off) { std::fprintf(stderr, "--decode: input truncated\n"); return 2; }
        const std::vector<uint8_t> m(in.begin() + off, in.begin() + off + n);
        off += n;
        std::printf("%s\n", describe(m).c_str());
    }
    return off == in.size() ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc == 2 && std::string(argv[1]) == "--decode") return decode_stdin();
    test_header_layout();
    test_well_formed_headers();
    test_malformed_headers();
    test_add_table_decodes_its_fields();
    test_add_table_refusals();
    test_observe();
    test_whole_requests();
    test_garbage();
    test_reassembler();
    std::printf("%d checks, %d failed\n", g_checks, g_failed);
    return g_failed ? 1 : 0;
}
