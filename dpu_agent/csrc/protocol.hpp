// The agent's control protocol: fixed versioned header + per-operation payload, little endian.
//
// Every message (request or reply) is a 32-byte Header followed by `length` payload bytes:
//   u32 magic "SNIA" | u16 version | u16 op | u32 table | u32 flags | f64 step | u32 length | u32 status
// Requests (trainer -> agent) and their payloads:
//   HELLO      token[32]                       first message of a connection (shm transport)
//   ADD_TABLE  AddTable fixed part (40 B), sampled[num_rows] (0/1), 5 region blobs (u32 len + bytes)
//   OBSERVE    u64 count                       flags: kPartial (row ids in the ids region)
//   SERVE      -                               flags: kPreview
//   DRIFT, STATS, CLOSE  -
// Replies echo op, table, flags and step; status 0 (payload: STATS -> Stats) or 1 (payload:
// the error text). Every length and count is checked against the limits below before anything
// is allocated; parse_* never read past `n` bytes and never allocate more than they were given.
// The Python side (dpu_agent/protocol.py) packs the same layout with struct.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the protocol is little endian");

namespace sni {
namespace proto {

constexpr uint32_t kMagic = 0x41494E53u;  // bytes "SNIA"
constexpr uint16_t kVersion = 1;
enum Op : uint16_t { kHello = 1, kAddTable = 2, kObserve = 3, kServe = 4, kDrift = 5, kStats = 6, kClose = 7, kOpEnd = 8 };
enum Flag : uint32_t { kPartial = 1u, kPreview = 2u };
enum Status : uint32_t { kOk = 0, kError = 1 };

// Limits (checked before any allocation).
constexpr uint32_t kTokenBytes = 32;
constexpr uint64_t kMaxRows = 1ull << 26;         // halo rows of one table
constexpr uint32_t kMaxDim = 1u << 16;            // row width
constexpr uint64_t kMaxCells = 1ull << 33;        // rows x dim of one table (32 GiB of float32)
constexpr uint32_t kMaxBlob = 1u << 16;           // one region descriptor (shm name, DOCA export)
constexpr uint32_t kNumRegions = 5;               // fresh, ids, served, weight, drift
constexpr uint32_t kMaxWindow = 4096;
constexpr uint32_t kNumKinds = 5;
constexpr uint32_t kAddFixed = 40;
constexpr uint32_t kMaxPayload = static_cast<uint32_t>(kAddFixed + kMaxRows + kNumRegions * (4 + kMaxBlob));
constexpr uint32_t kMaxErrorText = 1u << 16;

struct Header {
    uint32_t magic;
    uint16_t version;
    uint16_t op;
    uint32_t table;
    uint32_t flags;
    double step;
    uint32_t length;
    uint32_t status;
};
static_assert(sizeof(Header) == 32, "the header is 32 bytes");
static_assert(offsetof(Header, step) == 16 && offsetof(Header, length) == 24, "header layout");

inline const char* op_name(uint32_t op) {
    static const char* names[] = {"?", "hello", "add_table", "observe", "serve", "drift", "stats", "close"};
    return op < kOpEnd ? names[op] : "?";
}

inline Header make_header(uint16_t op, uint32_t table, uint32_t flags, double step, uint32_t length,
                          uint32_t status) {
    Header h;
    h.magic = kMagic; h.version = kVersion; h.op = op; h.table = table; h.flags = flags;
    h.step = step; h.length = length; h.status = status;
    return h;
}

// Largest payload a request with this op may carry (0 for ops without payload).
inline uint32_t max_request_payload(uint32_t op) {
    switch (op) {
    case kHello: return kTokenBytes;
    case kAddTable: return kMaxPayload;
    case kObserve: return 8;
    default: return 0;
    }
}

// Checks a request header (32 bytes at buf). False with *err set when malformed.
inline bool parse_request_header(const uint8_t* buf, size_t n, Header* h, std::string* err) {
    if (n != sizeof(Header)) { *err = "truncated header (" + std::to_string(n) + " bytes)"; return false; }
    std::memcpy(h, buf, sizeof(Header));
    if (h->magic != kMagic) { *err = "bad magic (not an sni-agent message)"; return false; }
    if (h->version != kVersion) {
        *err = "protocol version " + std::to_string(h->version) + " (this agent speaks " + std::to_string(kVersion) + ")";
        return false;
    }
    if (h->op == 0 || h->op >= kOpEnd) { *err = "unknown operation " + std::to_string(h->op); return false; }
    if (h->status != kOk) { *err = "a request must have status 0"; return false; }
    const uint32_t allowed = h->op == kObserve ? kPartial : (h->op == kServe ? kPreview : 0u);
    if (h->flags & ~allowed) { *err = std::string("flags ") + std::to_string(h->flags) + " invalid for " + op_name(h->op); return false; }
    const uint32_t maxlen = max_request_payload(h->op);
    if (h->length > maxlen) {
        *err = std::string(op_name(h->op)) + " payload of " + std::to_string(h->length) + " bytes exceeds the limit of " +
               std::to_string(maxlen);
        return false;
    }
    if ((h->op == kHello && h->length != kTokenBytes) || (h->op == kObserve && h->length != 8) ||
        (h->op == kAddTable && h->length < kAddFixed)) {
        *err = std::string(op_name(h->op)) + " payload of " + std::to_string(h->length) + " bytes has the wrong size";
        return false;
    }
    if ((h->op == kObserve || h->op == kServe || h->op == kDrift) && !std::isfinite(h->step)) {
        *err = std::string(op_name(h->op)) + " needs a finite step";
        return false;
    }
    return true;
}

struct Blob {
    const uint8_t* data = nullptr;
    uint32_t size = 0;
};

struct AddTable {
    uint64_t num_rows = 0;
    uint32_t dim = 0, kind = 0, window = 0;
    double beta = 0.0, lam = 0.0;
    const uint8_t* sampled = nullptr;  // num_rows bytes, each 0 or 1 (points into the payload)
    Blob regions[kNumRegions];
};

class Reader {
public:
    Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
    bool take(void* dst, size_t k) {
        if (k > n_ - off_) return false;
        std::memcpy(dst, p_ + off_, k);
        off_ += k;
        return true;
    }
    const uint8_t* span(size_t k) {
        if (k > n_ - off_) return nullptr;
        const uint8_t* s = p_ + off_;
        off_ += k;
        return s;
    }
    size_t left() const { return n_ - off_; }
private:
    const uint8_t* p_;
    size_t n_, off_ = 0;
};

inline bool parse_add_table(const uint8_t* p, size_t n, AddTable* a, std::string* err) {
    Reader r(p, n);
    uint32_t nregions = 0;
    if (!r.take(&a->num_rows, 8) || !r.take(&a->dim, 4) || !r.take(&a->kind, 4) || !r.take(&a->window, 4) ||
        !r.take(&nregions, 4) || !r.take(&a->beta, 8) || !r.take(&a->lam, 8)) {
        *err = "add_table payload shorter than its fixed part";
        return false;
    }
    if (a->num_rows > kMaxRows) { *err = "add_table: " + std::to_string(a->num_rows) + " rows exceed the limit of " + std::to_string(kMaxRows); return false; }
    if (a->dim < 1 || a->dim > kMaxDim) { *err = "add_table: dim " + std::to_string(a->dim) + " outside [1, " + std::to_string(kMaxDim) + "]"; return false; }
    if (a->num_rows * a->dim > kMaxCells) { *err = "add_table: rows x dim exceeds the limit of " + std::to_string(kMaxCells); return false; }
    if (a->kind >= kNumKinds) { *err = "add_table: unknown predictor kind " + std::to_string(a->kind); return false; }
    if (a->window < 1 || a->window > kMaxWindow) { *err = "add_table: window " + std::to_string(a->window) + " outside [1, 4096]"; return false; }
    if (!std::isfinite(a->beta) || !std::isfinite(a->lam)) { *err = "add_table: beta and lam must be finite"; return false; }
    if (nregions != kNumRegions) { *err = "add_table: " + std::to_string(nregions) + " regions (expected 5)"; return false; }
    a->sampled = r.span(static_cast<size_t>(a->num_rows));
    if (a->sampled == nullptr) { *err = "add_table: sampled mask truncated"; return false; }
    for (uint64_t i = 0; i < a->num_rows; ++i)
        if (a->sampled[i] > 1) { *err = "add_table: sampled mask byte " + std::to_string(i) + " is not 0 or 1"; return false; }
    for (uint32_t k = 0; k < kNumRegions; ++k) {
        uint32_t len = 0;
        if (!r.take(&len, 4)) { *err = "add_table: region " + std::to_string(k) + " truncated"; return false; }
        if (len == 0 || len > kMaxBlob) { *err = "add_table: region " + std::to_string(k) + " descriptor of " + std::to_string(len) + " bytes"; return false; }
        a->regions[k].data = r.span(len);
        a->regions[k].size = len;
        if (a->regions[k].data == nullptr) { *err = "add_table: region " + std::to_string(k) + " truncated"; return false; }
    }
    if (r.left() != 0) { *err = "add_table: " + std::to_string(r.left()) + " trailing bytes"; return false; }
    return true;
}

inline bool parse_observe(const uint8_t* p, size_t n, uint64_t* count, std::string* err) {
    if (n != 8) { *err = "observe payload must be 8 bytes"; return false; }
    std::memcpy(count, p, 8);
    if (*count > kMaxRows) { *err = "observe: count " + std::to_string(*count) + " exceeds the row limit"; return false; }
    return true;
}

// A whole request (header + payload) as one parse: what the fuzz target drives.
inline bool parse_request(const uint8_t* buf, size_t n, Header* h, std::string* err) {
    if (n < sizeof(Header)) { *err = "truncated header"; return false; }
    if (!parse_request_header(buf, sizeof(Header), h, err)) return false;
    if (n - sizeof(Header) != h->length) { *err = "payload length does not match the header"; return false; }
    const uint8_t* p = buf + sizeof(Header);
    if (h->op == kAddTable) { AddTable a; return parse_add_table(p, h->length, &a, err); }
    if (h->op == kObserve) { uint64_t c; return parse_observe(p, h->length, &c, err); }
    return true;
}

struct Stats {
    double predictor_s;
    int64_t tables, tracked_rows, predicted_slots;
};
static_assert(sizeof(Stats) == 32, "stats payload");

// Reassembles one message from frames of a message transport (DOCA Comch): each frame is a
// 1-byte marker (1: more follow, 0: last) plus bytes. The header is checked as soon as it is
// complete, so an oversized message is refused before its payload is buffered.
class Reassembler {
public:
    enum Result { kNeedMore, kDone, kBad };
    Result feed(const uint8_t* f, size_t n, std::string* err) {
        if (n < 1 || f[0] > 1) { *err = "bad frame marker"; return kBad; }
        const bool last = f[0] == 0;
        const size_t k = n - 1;
        if (buf_.size() + k > sizeof(Header) + static_cast<size_t>(kMaxPayload)) { *err = "message exceeds the size limit"; return kBad; }
        if (!checked_ && buf_.size() + k >= sizeof(Header)) {
            uint8_t hb[sizeof(Header)];
            const size_t have = buf_.size();
            if (have) std::memcpy(hb, buf_.data(), have);  // (buf_.data() may be null when empty)
            std::memcpy(hb + have, f + 1, sizeof(Header) - have);
            if (!parse_request_header(hb, sizeof(Header), &h_, err)) return kBad;
            checked_ = true;
        }
        if (checked_ && buf_.size() + k > sizeof(Header) + h_.length) { *err = "frames longer than the header says"; return kBad; }
        buf_.insert(buf_.end(), f + 1, f + n);
        if (!last) return kNeedMore;
        if (!checked_ || buf_.size() != sizeof(Header) + h_.length) { *err = "message shorter than its header says"; return kBad; }
        return kDone;
    }
    const Header& header() const { return h_; }
    const uint8_t* payload() const { return buf_.data() + sizeof(Header); }
    void reset() { buf_.clear(); checked_ = false; }
private:
    std::vector<uint8_t> buf_;
    Header h_{};
    bool checked_ = false;
};

}  // namespace proto
}  // namespace sni
