// Per-node feature predictors for the agent: the paper's self-feeding trend predictor
// (step / predict_window), Holt's double exponential smoothing, and a gated (shrunk,
// capped, read-only) trend predictor that is never served unless it has beaten the cache.
//
// Storage. Every predictor keeps, per tracked node slot, one contiguous float32 record
// (64-byte aligned, stride a multiple of 16 floats) so a row's state is read and written
// sequentially, plus a dense 16-byte NodeMeta (last time, ring head/fill, call stamp).
// The caller owns both buffers (see NodeStore).
//   trend record : [header: double tau[W] | float D | extra floats | pad to 64 B]
//                  [N: dim] [H: W x dim ring of past values; H[head] is x_last]
//   holt record  : [l: dim] [b: dim]
// x_last and t_last are not stored separately: they are the ring's latest entry.
//
// Calls. Every public call first validates all ids (range, duplicates via a per-call
// stamp, observed-ness, time order) and only then mutates, so a failed call leaves the
// state unchanged. A call returns a Status and the offending row in *bad. Calls hold a
// mutex, so the Python front end can release the GIL around them.
//
// Arithmetic. Per-row scalars (dt, exp factors, 1/max(D, eps), ...) are computed in
// double and rounded once to float; the per-dim loops are float32 element-wise updates
// with the select hoisted out of the loop, so GCC vectorises them (AVX2 clones via
// target_clones). Reductions use 16 float partial sums (SLP-vectorised, fixed order).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <vector>

// AVX2 clones on x86-64 only (the aarch64 agent and other targets get the portable loops).
#if defined(__x86_64__) && !defined(SNI_NO_CLONES)
#define SNI_TARGET_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SNI_TARGET_CLONES
#endif

namespace sni {
namespace pred {

enum Status : int { kOk = 0, kOutOfRange = 1, kDuplicate = 2, kNotObserved = 3, kTimeBackwards = 4 };

struct NodeMeta {
    double t_last;   // time of the ring's latest entry
    uint32_t stamp;  // id of the last call that named this node (duplicate detection)
    uint16_t head;   // ring slot of the latest entry
    uint16_t fill;   // number of valid ring entries; 0 = never observed
};
static_assert(sizeof(NodeMeta) == 16, "NodeMeta must stay 16 bytes");

constexpr int64_t kMaxWindow = 4096;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

__attribute__((always_inline)) inline void prefetch_span(const void* p, int64_t bytes) {
    const char* b = static_cast<const char*>(p);
    const char* last = b + bytes - 1;
    for (; b <= last; b += 64) __builtin_prefetch(b, 1, 3);
    __builtin_prefetch(last, 1, 3);
}

// Distance (rows) at which the row loops prefetch the record of a later row; its NodeMeta
// is prefetched twice as far ahead, so that reading it (to find the ring slots) hits.
inline int64_t prefetch_distance(int64_t dim) { return dim <= 32 ? 16 : (dim <= 96 ? 8 : 6); }

// Dot products with 16 fixed partial sums: same order every time, and the 16-lane body
// is SLP-vectorised without -ffast-math.
__attribute__((always_inline)) inline float dot(const float* __restrict__ a, const float* __restrict__ b,
                                                int64_t n) {
    float acc[16] = {0};
    int64_t d = 0;
    for (; d + 16 <= n; d += 16)
        for (int j = 0; j < 16; ++j) acc[j] += a[d + j] * b[d + j];
    float s = 0.0f;
    for (int j = 0; j < 16; ++j) s += acc[j];
    for (; d < n; ++d) s += a[d] * b[d];
    return s;
}

// ---------------------------------------------------------------------------------------
// Node slots: records + dense metadata + the validation pass shared by all calls.
// The buffers are owned by the caller (the Python front end allocates them with numpy,
// which asks the kernel for transparent huge pages -- random rows then rarely miss the
// TLB): data holds num_nodes*stride floats, 64-byte aligned; meta num_nodes zeroed
// NodeMeta. The store never reads a record before the node's first observation.
inline int64_t record_stride(int64_t header_bytes, int64_t vec_floats) {
    return round_up((header_bytes > 0 ? round_up(header_bytes, 64) / 4 : 0) + vec_floats, 16);
}

class NodeStore {
public:
    NodeStore(int64_t num_nodes, int64_t header_bytes, int64_t vec_floats, float* data, NodeMeta* meta)
        : num_nodes_(num_nodes),
          hdr_floats_(header_bytes > 0 ? round_up(header_bytes, 64) / 4 : 0),
          stride_(record_stride(header_bytes, vec_floats)),
          data_(data),
          meta_(meta) {}

    int64_t num_nodes() const { return num_nodes_; }
    int64_t stride() const { return stride_; }
    int64_t hdr_floats() const { return hdr_floats_; }
    float* rec(int64_t i) { return data_ + i * stride_; }
    const float* rec(int64_t i) const { return data_ + i * stride_; }
    NodeMeta& meta(int64_t i) { return meta_[i]; }
    const NodeMeta& meta(int64_t i) const { return meta_[i]; }
    int64_t bytes() const { return num_nodes_ * (stride_ * 4 + static_cast<int64_t>(sizeof(NodeMeta))); }
    void prefetch_meta(const int64_t* ids, int64_t r, int64_t n) const {
        if (r < n) __builtin_prefetch(meta_ + ids[r], 1, 3);
    }

    // One pass over ids: range, duplicates, observed-ness (need_obs(r) true: row r must be
    // observed already) and, if check_time, t >= t_last. Writes only call stamps.
    template <class NeedObserved>
    int validate(const int64_t* ids, int64_t n, double t, bool check_time, NeedObserved need_obs,
                 int64_t* bad) {
        const uint32_t st = next_stamp();
        const int64_t pf = 16;
        for (int64_t r = 0; r < n; ++r) {
            if (r + pf < n) {
                const uint64_t j = static_cast<uint64_t>(ids[r + pf]);
                if (j < static_cast<uint64_t>(num_nodes_)) __builtin_prefetch(meta_ + j, 1, 3);
            }
            const int64_t i = ids[r];
            if (static_cast<uint64_t>(i) >= static_cast<uint64_t>(num_nodes_)) { *bad = r; return kOutOfRange; }
            NodeMeta& m = meta_[i];
            if (m.stamp == st) { *bad = r; return kDuplicate; }
            m.stamp = st;
            if (m.fill == 0) {
                if (need_obs(r)) { *bad = r; return kNotObserved; }
            } else if (check_time && t < m.t_last) {
                *bad = r;
                return kTimeBackwards;
            }
        }
        return kOk;
    }

    int validate_observed(const int64_t* ids, int64_t n, int64_t* bad) {
        return validate(ids, n, 0.0, false, [](int64_t) { return true; }, bad);
    }
    int validate_any(const int64_t* ids, int64_t n, int64_t* bad) {
        return validate(ids, n, 0.0, false, [](int64_t) { return false; }, bad);
    }

private:
    uint32_t next_stamp() {
        if (++epoch_ == 0) {  // wrapped after 2^32 calls: forget old stamps
            for (int64_t i = 0; i < num_nodes_; ++i) meta_[i].stamp = 0;
            epoch_ = 1;
        }
        return epoch_;
    }

    int64_t num_nodes_, hdr_floats_, stride_;
    float* data_;
    NodeMeta* meta_;
    uint32_t epoch_ = 0;
};

// Per-row factors depend only on time differences (dt, ring gaps), and times are global
// steps: a call sees few distinct values. The loops keep the factors of each value in a
// small direct-mapped cache and recompute exp() only on a miss. A cached value is the
// same double the computation gives, so results do not depend on the cache.
template <int NV>
struct ScalarCache {
    static constexpr int kSize = 64;
    double key[kSize];
    double val[kSize][NV];
    ScalarCache() { for (double& k : key) k = std::nan(""); }
    template <class Compute>
    __attribute__((always_inline)) const double* get(double x, Compute compute) {
        uint64_t b;
        std::memcpy(&b, &x, sizeof b);
        const int h = static_cast<int>((b * 0x9E3779B97F4A7C15ull) >> 58);
        if (!(key[h] == x)) {
            key[h] = x;
            compute(x, val[h]);
        }
        return val[h];
    }
};

// ---------------------------------------------------------------------------------------
// Trend state shared by TrendPredictor and GatedPredictor.
struct TrendLayout {
    int64_t dim, window, hdr, stride;
    // header
    static double* tau(float* rec) { return reinterpret_cast<double*>(rec); }
    float* hf(float* rec) const { return rec + 2 * window; }  // D, then extra floats
    float* N(float* rec) const { return rec + hdr; }
    float* H(float* rec, int64_t slot) const { return rec + hdr + dim * (1 + slot); }
};

// One row of the trend update with x_pred = x_last + cv * N and
// N = g*N + (x_new - x_last)*inv; x_new = obs or x_pred. InPlace: window 1 (xs == xl).
template <bool HasObs, bool InPlace>
__attribute__((always_inline)) inline void trend_row(float* __restrict__ xl, float* __restrict__ xs,
                                                     float* __restrict__ N, const float* __restrict__ o,
                                                     float* __restrict__ y, int64_t dim, float cv, float g,
                                                     float inv) {
    for (int64_t d = 0; d < dim; ++d) {
        const float c = xl[d];
        const float nv = N[d];
        const float xp = c + nv * cv;
        y[d] = xp;
        const float xn = HasObs ? o[d] : xp;
        N[d] = nv * g + (xn - c) * inv;
        if (InPlace) xl[d] = xn; else xs[d] = xn;
    }
}

// First observation of a node: ring = [obs], N = 0, D = 0 (+ extra header floats = 0).
inline void trend_init_row(const TrendLayout& L, float* rec, NodeMeta& m, const float* o, float* y,
                           double t, int64_t extra) {
    TrendLayout::tau(rec)[0] = t;
    float* hf = L.hf(rec);
    for (int64_t k = 0; k < 1 + extra; ++k) hf[k] = 0.0f;
    float* N = L.N(rec);
    float* h = L.H(rec, 0);
    for (int64_t d = 0; d < L.dim; ++d) { N[d] = 0.0f; h[d] = o[d]; }
    if (y) std::memcpy(y, o, static_cast<size_t>(L.dim) * sizeof(float));
    m.head = 0;
    m.fill = 1;
    m.t_last = t;
}

__attribute__((always_inline)) inline void trend_prefetch(const TrendLayout& L, NodeStore& s, int64_t i) {
    const NodeMeta& m = s.meta(i);
    float* rec = s.rec(i);
    const int64_t nh = m.head + 1 == L.window ? 0 : m.head + 1;
    const int64_t vb = L.dim * 4;
    __builtin_prefetch(rec, 1, 3);
    prefetch_span(L.N(rec), vb);
    prefetch_span(L.H(rec, m.head), vb);
    if (nh != m.head) prefetch_span(L.H(rec, nh), vb);
}

// The paper's self-feeding step over validated rows.
SNI_TARGET_CLONES
inline void trend_step_rows(const TrendLayout& L, NodeStore& s, const int64_t* ids, int64_t n, double t,
                            const float* obs, const uint8_t* mask, float* out, double beta, double lam,
                            double eps) {
    const int64_t dim = L.dim, W = L.window, pf = prefetch_distance(dim);
    ScalarCache<3> cache;  // dt -> dt*exp(-beta*dt), exp(-lam*dt), 1/max(dt, eps)
    for (int64_t r = 0; r < n; ++r) {
        s.prefetch_meta(ids, r + 2 * pf, n);
        if (r + pf < n) trend_prefetch(L, s, ids[r + pf]);
        const int64_t i = ids[r];
        NodeMeta& m = s.meta(i);
        float* rec = s.rec(i);
        const bool has_obs = obs != nullptr && (mask == nullptr || mask[r] != 0);
        const float* o = has_obs ? obs + r * dim : nullptr;
        float* y = out + r * dim;
        if (m.fill == 0) {  // validated: has_obs
            trend_init_row(L, rec, m, o, y, t, 0);
            continue;
        }
        const double dt = t - m.t_last;
        const double* f = cache.get(dt, [&](double x, double* v) {
            v[0] = x * std::exp(-beta * x);
            v[1] = std::exp(-lam * x);
            v[2] = 1.0 / std::max(x, eps);
        });
        float* hf = L.hf(rec);
        const double D = hf[0];
        const float cv = static_cast<float>(f[0] / std::max(D, eps));
        const double gd = f[1];
        const float g = static_cast<float>(gd);
        const float inv = static_cast<float>(f[2]);
        const int64_t nh = m.head + 1 == W ? 0 : m.head + 1;
        float* xl = L.H(rec, m.head);
        float* N = L.N(rec);
        if (W == 1) {
            if (has_obs) trend_row<true, true>(xl, nullptr, N, o, y, dim, cv, g, inv);
            else trend_row<false, true>(xl, nullptr, N, nullptr, y, dim, cv, g, inv);
        } else {
            float* xs = L.H(rec, nh);
            if (has_obs) trend_row<true, false>(xl, xs, N, o, y, dim, cv, g, inv);
            else trend_row<false, false>(xl, xs, N, nullptr, y, dim, cv, g, inv);
        }
        hf[0] = static_cast<float>(gd * D + 1.0);
        TrendLayout::tau(rec)[nh] = t;
        m.head = static_cast<uint16_t>(nh);
        if (m.fill < W) ++m.fill;
        m.t_last = t;
    }
}

// x_pred of the self-feeding step at time t, read-only (what `step` without an
// observation would return, without feeding it back): x_last + N * dt*exp(-beta*dt)/max(D, eps).
SNI_TARGET_CLONES
inline void trend_peek_rows(const TrendLayout& L, NodeStore& s, const int64_t* ids, int64_t n, double t,
                            float* out, double beta, double eps) {
    const int64_t dim = L.dim, pf = prefetch_distance(dim);
    ScalarCache<1> cache;  // dt -> dt*exp(-beta*dt)
    for (int64_t r = 0; r < n; ++r) {
        s.prefetch_meta(ids, r + 2 * pf, n);
        if (r + pf < n) trend_prefetch(L, s, ids[r + pf]);
        const int64_t i = ids[r];
        const NodeMeta& m = s.meta(i);
        float* rec = s.rec(i);
        const double* f = cache.get(t - m.t_last, [&](double x, double* v) { v[0] = x * std::exp(-beta * x); });
        const float cv = static_cast<float>(f[0] / std::max(static_cast<double>(L.hf(rec)[0]), eps));
        const float* xl = L.H(rec, m.head);
        const float* N = L.N(rec);
        float* y = out + r * dim;
        for (int64_t d = 0; d < dim; ++d) y[d] = xl[d] + N[d] * cv;
    }
}

// hbar + dt*Phi*exp(-lam_pred*dt) over the ring (read-only), written as one pass over the
// K entries: y = alpha*H_last + sum_k [ (1-alpha)/K * H_k + c_k (H_k - H_{k-1}) ].
SNI_TARGET_CLONES
inline void trend_window_rows(const TrendLayout& L, NodeStore& s, const int64_t* ids, int64_t n, double t,
                              double alpha, double scale, double lam_pred, double eps, float* out,
                              double* coef, int64_t* slots) {
    const int64_t dim = L.dim, W = L.window, pf = prefetch_distance(dim);
    const float a = static_cast<float>(alpha);
    double* ptau = coef + W;   // previous row's ring times (time order), to reuse coef
    int64_t pK = 0;
    double pt = std::nan("");
    float mk = 0.0f;
    ScalarCache<1> fcache, wcache;  // dt -> dt*exp(-lam_pred*dt); gap -> exp(-|gap|/scale)
    for (int64_t r = 0; r < n; ++r) {
        s.prefetch_meta(ids, r + 2 * pf, n);
        if (r + pf < n) {
            const int64_t j = ids[r + pf];
            float* rj = s.rec(j);
            __builtin_prefetch(rj, 0, 3);
            prefetch_span(L.H(rj, 0), W * dim * 4);
        }
        const int64_t i = ids[r];
        const NodeMeta& m = s.meta(i);
        float* rec = s.rec(i);
        const double* tau = TrendLayout::tau(rec);
        const int64_t K = m.fill;
        int64_t first = m.head - (K - 1);  // slot of the oldest entry
        if (first < 0) first += W;
        int64_t* slot = slots;
        for (int64_t k = 0, sk = first; k < K; ++k) {
            slot[k] = sk;
            if (++sk == W) sk = 0;
        }
        bool same = K == pK && pt == t;
        for (int64_t k = 0; same && k < K; ++k) same = ptau[k] == tau[slot[k]];
        if (!same) {
            for (int64_t k = 0; k < K; ++k) ptau[k] = tau[slot[k]];
            pK = K;
            pt = t;
            const double tl = ptau[K - 1];
            const double f = *fcache.get(t - tl, [&](double x, double* v) { v[0] = x * std::exp(-lam_pred * x); });
            double sumw = 0.0;
            for (int64_t k = 1; k < K; ++k) {
                coef[k] = *wcache.get(tl - ptau[k], [&](double x, double* v) { v[0] = std::exp(-std::fabs(x) / scale); });
                sumw += coef[k];
            }
            for (int64_t k = 1; k < K; ++k)
                coef[k] = f * coef[k] / (std::max(ptau[k] - ptau[k - 1], eps) * sumw);
            mk = static_cast<float>((1.0 - alpha) / static_cast<double>(K));
        }
        float* __restrict__ y = out + r * dim;
        const float* __restrict__ hl = L.H(rec, m.head);
        for (int64_t d = 0; d < dim; ++d) y[d] = a * hl[d];
        const float* __restrict__ h0 = L.H(rec, first);
        for (int64_t d = 0; d < dim; ++d) y[d] += mk * h0[d];
        for (int64_t k = 1; k < K; ++k) {
            const float* __restrict__ hk = L.H(rec, slot[k]);
            const float* __restrict__ hp = L.H(rec, slot[k - 1]);
            const float ck = static_cast<float>(coef[k]);
            for (int64_t d = 0; d < dim; ++d) y[d] += mk * hk[d] + ck * (hk[d] - hp[d]);
        }
    }
}

inline void copy_last_rows(const TrendLayout& L, NodeStore& s, const int64_t* ids, int64_t n, float* out) {
    for (int64_t r = 0; r < n; ++r) {
        const int64_t i = ids[r];
        std::memcpy(out + r * L.dim, L.H(s.rec(i), s.meta(i).head), static_cast<size_t>(L.dim) * sizeof(float));
    }
}

inline void observed_rows(NodeStore& s, const int64_t* ids, int64_t n, uint8_t* out) {
    for (int64_t r = 0; r < n; ++r) out[r] = s.meta(ids[r]).fill > 0;
}

inline void last_time_rows(NodeStore& s, const int64_t* ids, int64_t n, double* out) {
    for (int64_t r = 0; r < n; ++r) {
        const NodeMeta& m = s.meta(ids[r]);
        out[r] = m.fill > 0 ? m.t_last : std::nan("");
    }
}

// ---------------------------------------------------------------------------------------
class TrendPredictor {
public:
    static int64_t stride(int64_t dim, int64_t window) { return record_stride(8 * window + 4, dim * (1 + window)); }

    TrendPredictor(int64_t num_nodes, int64_t dim, int64_t window, double beta, double lam, double eps,
                   float* data, NodeMeta* meta)
        : store_(num_nodes, 8 * window + 4, dim * (1 + window), data, meta),
          L_{dim, window, store_.hdr_floats(), store_.stride()},
          beta_(beta), lam_(lam), eps_(eps), coef_(2 * static_cast<size_t>(window)),
          slots_(static_cast<size_t>(window)) {}

    int step(const int64_t* ids, int64_t n, double t, const float* obs, const uint8_t* mask, float* out,
             int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate(ids, n, t, true, [&](int64_t r) {
            return obs == nullptr || (mask != nullptr && mask[r] == 0);
        }, bad);
        if (st != kOk) return st;
        trend_step_rows(L_, store_, ids, n, t, obs, mask, out, beta_, lam_, eps_);
        return kOk;
    }

    int peek(const int64_t* ids, int64_t n, double t, float* out, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate_observed(ids, n, bad);
        if (st != kOk) return st;
        trend_peek_rows(L_, store_, ids, n, t, out, beta_, eps_);
        return kOk;
    }

    int predict_window(const int64_t* ids, int64_t n, double t, double alpha, double scale, double lam_pred,
                       float* out, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate_observed(ids, n, bad);
        if (st != kOk) return st;
        trend_window_rows(L_, store_, ids, n, t, alpha, scale, lam_pred, eps_, out, coef_.data(), slots_.data());
        return kOk;
    }

    int last(const int64_t* ids, int64_t n, float* out, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate_observed(ids, n, bad);
        if (st != kOk) return st;
        copy_last_rows(L_, store_, ids, n, out);
        return kOk;
    }

    int last_time(const int64_t* ids, int64_t n, double* out, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate_any(ids, n, bad);
        if (st != kOk) return st;
        last_time_rows(store_, ids, n, out);
        return kOk;
    }

    int observed(const int64_t* ids, int64_t n, uint8_t* out, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate_any(ids, n, bad);
        if (st != kOk) return st;
        observed_rows(store_, ids, n, out);
        return kOk;
    }

    int64_t state_bytes() const { return store_.bytes(); }
    int64_t record_floats() const { return store_.stride(); }

private:
    NodeStore store_;
    TrendLayout L_;
    double beta_, lam_, eps_;
    std::vector<double> coef_;   // [0, W): coefficients, [W, 2W): the times they belong to
    std::vector<int64_t> slots_;
    std::mutex mu_;
};

// ---------------------------------------------------------------------------------------
// Holt's double exponential smoothing: record [l: dim][b: dim], t_last in NodeMeta.
SNI_TARGET_CLONES
inline void holt_observe_rows(NodeStore& s, int64_t dim, const int64_t* ids, int64_t n, double t,
                              const float* obs, double alpha, double beta_trend, double eps) {
    const int64_t pf = prefetch_distance(dim);
    const float a = static_cast<float>(alpha), a1 = static_cast<float>(1.0 - alpha);
    const float g1 = static_cast<float>(1.0 - beta_trend);
    for (int64_t r = 0; r < n; ++r) {
        s.prefetch_meta(ids, r + 2 * pf, n);
        if (r + pf < n) prefetch_span(s.rec(ids[r + pf]), 2 * dim * 4);
        const int64_t i = ids[r];
        NodeMeta& m = s.meta(i);
        float* __restrict__ l = s.rec(i);
        float* __restrict__ b = l + dim;
        const float* __restrict__ o = obs + r * dim;
        if (m.fill == 0) {
            for (int64_t d = 0; d < dim; ++d) { l[d] = o[d]; b[d] = 0.0f; }
            m.fill = 1;
            m.t_last = t;
            continue;
        }
        const double dt = t - m.t_last;
        const float dtf = static_cast<float>(dt);
        const float gi = static_cast<float>(beta_trend / std::max(dt, eps));
        for (int64_t d = 0; d < dim; ++d) {
            const float lv = l[d], bv = b[d];
            const float lp = lv + bv * dtf;
            const float ln = a * o[d] + a1 * lp;
            b[d] = (ln - lv) * gi + g1 * bv;
            l[d] = ln;
        }
        m.t_last = t;
    }
}

SNI_TARGET_CLONES
inline void holt_forecast_rows(NodeStore& s, int64_t dim, const int64_t* ids, int64_t n, double t, float* out) {
    const int64_t pf = prefetch_distance(dim);
    for (int64_t r = 0; r < n; ++r) {
        s.prefetch_meta(ids, r + 2 * pf, n);
        if (r + pf < n) prefetch_span(s.rec(ids[r + pf]), 2 * dim * 4);
        const int64_t i = ids[r];
        const float* __restrict__ l = s.rec(i);
        const float* __restrict__ b = l + dim;
        float* __restrict__ y = out + r * dim;
        const float dtf = static_cast<float>(t - s.meta(i).t_last);
        for (int64_t d = 0; d < dim; ++d) y[d] = l[d] + b[d] * dtf;
    }
}

class HoltPredictor {
public:
    static int64_t stride(int64_t dim) { return record_stride(0, 2 * dim); }

    HoltPredictor(int64_t num_nodes, int64_t dim, double alpha, double beta_trend, double eps, float* data,
                  NodeMeta* meta)
        : store_(num_nodes, 0, 2 * dim, data, meta), dim_(dim), alpha_(alpha), beta_trend_(beta_trend), eps_(eps) {}

    int observe(const int64_t* ids, int64_t n, double t, const float* obs, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate(ids, n, t, true, [](int64_t) { return false; }, bad);
        if (st != kOk) return st;
        holt_observe_rows(store_, dim_, ids, n, t, obs, alpha_, beta_trend_, eps_);
        return kOk;
    }

    int forecast(const int64_t* ids, int64_t n, double t, float* out, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate_observed(ids, n, bad);
        if (st != kOk) return st;
        holt_forecast_rows(store_, dim_, ids, n, t, out);
        return kOk;
    }

    int observed(const int64_t* ids, int64_t n, uint8_t* out, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate_any(ids, n, bad);
        if (st != kOk) return st;
        observed_rows(store_, ids, n, out);
        return kOk;
    }

    int64_t state_bytes() const { return store_.bytes(); }

private:
    NodeStore store_;
    int64_t dim_;
    double alpha_, beta_trend_, eps_;
    std::mutex mu_;
};

// ---------------------------------------------------------------------------------------
// Gated predictor: trend state + per-node comparison sums. Header floats after D:
// A, B, Ep, Ec (decayed sums), s (last |obs - c| / dt), n_cmp (uint32 bits).
struct GateParams {
    double beta, lam, eps, decay, margin, max_horizon, trend_cap;
    int64_t min_compare;
};

enum GateField : int { kA = 1, kB = 2, kEp = 3, kEc = 4, kS = 5, kNcmp = 6 };
constexpr int64_t kGateExtra = 6;

inline uint32_t get_ncmp(const float* hf) { uint32_t v; std::memcpy(&v, hf + kNcmp, 4); return v; }
inline void set_ncmp(float* hf, uint32_t v) { std::memcpy(hf + kNcmp, &v, 4); }

inline double gate_weight(const float* hf, const GateParams& P) {
    const double B = hf[kB];
    // confidence test: the prediction must have beaten the cache by the margin on average
    if (get_ncmp(hf) < static_cast<uint64_t>(P.min_compare) || !(B > 0.0) ||
        !(hf[kEp] < (1.0 - P.margin) * hf[kEc]))
        return 0.0;
    return std::min(std::max(static_cast<double>(hf[kA]) / B, 0.0), 1.0) * (1.0 - P.margin);
}

// k such that the capped prediction is p = c + k*N; fe = dte*exp(-beta*dte) with dte the
// time since the last observation clipped to max_horizon.
inline double gate_pred_coef(const float* hf, double fe, double nn, const GateParams& P) {
    const double Dm = std::max(static_cast<double>(hf[0]), P.eps);
    const double vnorm = std::sqrt(nn) / Dm;
    const double cap = P.trend_cap * static_cast<double>(hf[kS]);
    const double shrink = vnorm > cap ? cap / vnorm : 1.0;
    return fe * shrink / Dm;
}

template <bool InPlace>
__attribute__((always_inline)) inline void gate_observe_row(float* __restrict__ xl, float* __restrict__ xs,
                                                            float* __restrict__ N, const float* __restrict__ o,
                                                            int64_t dim, float kf, float g, float inv,
                                                            float sums[4]) {
    float ed[16] = {0}, dd[16] = {0}, po[16] = {0}, co[16] = {0};
    int64_t d = 0;
    for (; d + 16 <= dim; d += 16) {
        for (int j = 0; j < 16; ++j) {
            const float c = xl[d + j], ov = o[d + j], nv = N[d + j];
            const float p = c + nv * kf;
            const float e = ov - c, dl = p - c, q = p - ov;
            ed[j] += e * dl;
            dd[j] += dl * dl;
            po[j] += q * q;
            co[j] += e * e;
            N[d + j] = nv * g + e * inv;
            if (InPlace) xl[d + j] = ov; else xs[d + j] = ov;
        }
    }
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int j = 0; j < 16; ++j) { s0 += ed[j]; s1 += dd[j]; s2 += po[j]; s3 += co[j]; }
    for (; d < dim; ++d) {
        const float c = xl[d], ov = o[d], nv = N[d];
        const float p = c + nv * kf;
        const float e = ov - c, dl = p - c, q = p - ov;
        s0 += e * dl; s1 += dl * dl; s2 += q * q; s3 += e * e;
        N[d] = nv * g + e * inv;
        if (InPlace) xl[d] = ov; else xs[d] = ov;
    }
    sums[0] = s0; sums[1] = s1; sums[2] = s2; sums[3] = s3;
}

SNI_TARGET_CLONES
inline void gate_observe_rows(const TrendLayout& L, NodeStore& s, const int64_t* ids, int64_t n, double t,
                              const float* obs, const GateParams& P) {
    const int64_t dim = L.dim, W = L.window, pf = prefetch_distance(dim);
    const double gdec = P.decay;
    ScalarCache<3> cache;  // dt -> dte*exp(-beta*dte), exp(-lam*dt), 1/max(dt, eps)
    for (int64_t r = 0; r < n; ++r) {
        s.prefetch_meta(ids, r + 2 * pf, n);
        if (r + pf < n) trend_prefetch(L, s, ids[r + pf]);
        const int64_t i = ids[r];
        NodeMeta& m = s.meta(i);
        float* rec = s.rec(i);
        const float* o = obs + r * dim;
        if (m.fill == 0) {
            trend_init_row(L, rec, m, o, nullptr, t, kGateExtra);
            continue;
        }
        float* hf = L.hf(rec);
        float* N = L.N(rec);
        float* xl = L.H(rec, m.head);
        const double dt = t - m.t_last;
        const double* f = cache.get(dt, [&](double x, double* v) {
            const double dte = std::min(x, P.max_horizon);
            v[0] = dte * std::exp(-P.beta * dte);
            v[1] = std::exp(-P.lam * x);
            v[2] = 1.0 / std::max(x, P.eps);
        });
        const double k = gate_pred_coef(hf, f[0], static_cast<double>(dot(N, N, dim)), P);
        const double gd = f[1];
        const double invd = f[2];
        const int64_t nh = m.head + 1 == W ? 0 : m.head + 1;
        float sums[4];
        if (W == 1) gate_observe_row<true>(xl, nullptr, N, o, dim, static_cast<float>(k), static_cast<float>(gd),
                                           static_cast<float>(invd), sums);
        else gate_observe_row<false>(xl, L.H(rec, nh), N, o, dim, static_cast<float>(k), static_cast<float>(gd),
                                     static_cast<float>(invd), sums);
        hf[kA] = static_cast<float>(gdec * hf[kA] + sums[0]);
        hf[kB] = static_cast<float>(gdec * hf[kB] + sums[1]);
        hf[kEp] = static_cast<float>(gdec * hf[kEp] + sums[2]);
        hf[kEc] = static_cast<float>(gdec * hf[kEc] + sums[3]);
        hf[kS] = static_cast<float>(std::sqrt(static_cast<double>(sums[3])) * invd);
        set_ncmp(hf, get_ncmp(hf) + 1);
        hf[0] = static_cast<float>(gd * hf[0] + 1.0);
        TrendLayout::tau(rec)[nh] = t;
        m.head = static_cast<uint16_t>(nh);
        if (m.fill < W) ++m.fill;
        m.t_last = t;
    }
}

SNI_TARGET_CLONES
inline void gate_serve_rows(const TrendLayout& L, NodeStore& s, const int64_t* ids, int64_t n, double t,
                            float* out, float* wout, const GateParams& P) {
    const int64_t dim = L.dim, pf = prefetch_distance(dim);
    ScalarCache<1> cache;  // dt -> dte*exp(-beta*dte)
    for (int64_t r = 0; r < n; ++r) {
        s.prefetch_meta(ids, r + 2 * pf, n);
        if (r + pf < n) {
            const int64_t j = ids[r + pf];
            float* rj = s.rec(j);
            __builtin_prefetch(rj, 0, 3);
            prefetch_span(L.N(rj), dim * 4);
            prefetch_span(L.H(rj, s.meta(j).head), dim * 4);
        }
        const int64_t i = ids[r];
        const NodeMeta& m = s.meta(i);
        float* rec = s.rec(i);
        const float* hf = L.hf(rec);
        const float* __restrict__ c = L.H(rec, m.head);
        float* __restrict__ y = out + r * dim;
        const double w = gate_weight(hf, P);
        wout[r] = static_cast<float>(w);
        if (w == 0.0) {
            std::memcpy(y, c, static_cast<size_t>(dim) * sizeof(float));
            continue;
        }
        const float* __restrict__ N = L.N(rec);
        const double fe = *cache.get(t - m.t_last, [&](double x, double* v) {
            const double dte = std::min(x, P.max_horizon);
            v[0] = dte * std::exp(-P.beta * dte);
        });
        const float kf = static_cast<float>(w * gate_pred_coef(hf, fe, static_cast<double>(dot(N, N, dim)), P));
        for (int64_t d = 0; d < dim; ++d) y[d] = c[d] + N[d] * kf;
    }
}

struct GateStats {
    int64_t nodes = 0, compared = 0, open = 0;
    double weight_sum = 0.0;
};

class GatedPredictor {
public:
    static int64_t stride(int64_t dim, int64_t window) {
        return record_stride(8 * window + 4 * (1 + kGateExtra), dim * (1 + window));
    }

    GatedPredictor(int64_t num_nodes, int64_t dim, int64_t window, const GateParams& P, float* data,
                   NodeMeta* meta)
        : store_(num_nodes, 8 * window + 4 * (1 + kGateExtra), dim * (1 + window), data, meta),
          L_{dim, window, store_.hdr_floats(), store_.stride()}, P_(P) {}

    int observe(const int64_t* ids, int64_t n, double t, const float* obs, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate(ids, n, t, true, [](int64_t) { return false; }, bad);
        if (st != kOk) return st;
        gate_observe_rows(L_, store_, ids, n, t, obs, P_);
        return kOk;
    }

    int serve(const int64_t* ids, int64_t n, double t, float* out, float* w, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate_observed(ids, n, bad);
        if (st != kOk) return st;
        gate_serve_rows(L_, store_, ids, n, t, out, w, P_);
        return kOk;
    }

    int last(const int64_t* ids, int64_t n, float* out, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate_observed(ids, n, bad);
        if (st != kOk) return st;
        copy_last_rows(L_, store_, ids, n, out);
        return kOk;
    }

    int observed(const int64_t* ids, int64_t n, uint8_t* out, int64_t* bad) {
        std::lock_guard<std::mutex> lock(mu_);
        const int st = store_.validate_any(ids, n, bad);
        if (st != kOk) return st;
        observed_rows(store_, ids, n, out);
        return kOk;
    }

    GateStats stats() {
        std::lock_guard<std::mutex> lock(mu_);
        GateStats g;
        for (int64_t i = 0; i < store_.num_nodes(); ++i) {
            if (store_.meta(i).fill == 0) continue;
            const float* hf = L_.hf(store_.rec(i));
            ++g.nodes;
            if (get_ncmp(hf) >= static_cast<uint64_t>(P_.min_compare)) ++g.compared;
            const double w = gate_weight(hf, P_);
            if (w > 0.0) { ++g.open; g.weight_sum += w; }
        }
        return g;
    }

    int64_t state_bytes() const { return store_.bytes(); }

private:
    NodeStore store_;
    TrendLayout L_;
    GateParams P_;
    std::mutex mu_;
};

}  // namespace pred
}  // namespace sni
