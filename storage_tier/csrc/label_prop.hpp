// Switching-aware partitioning: size-penalised label propagation over a CSR graph.
//
// Memory is the point. Beyond the CSR (indptr, indices) and the output (one int64 part id
// per vertex, which doubles as the working assignment) the state is
//   * dstpart: one small int per CSR entry, the partition (label) of that entry's
//     destination (uint8 for <= 256 labels, uint16 for <= 65536, int32 beyond), brought up
//     to date as vertices move;
//   * per label: its size and a neighbour counter (the per-visit scratch), plus the list of
//     labels a visit touched;
//   * one byte per vertex: the chunk of the current iteration it moved in (or none);
//   * with levels > 0, while merging: a labels x labels uint32 count matrix and the list of
//     connected label pairs (at most ~8 MiB at the 1024-label default maximum).
// Nothing is O(|V| x p).
//
// One iteration visits every vertex once, in a random order (blocks of 64 consecutive ids
// in a seeded random order, a seeded random order within each block: random, but with the
// CSR's cache locality kept). The visits are split into `chunks` chunks. A vertex visited
// in chunk c first refreshes its own dstpart entries whose destination moved in an earlier
// chunk, so it sees every move but those of its own chunk (the prototype's "propose in
// parallel, refresh after each chunk" view: fully asynchronous updates oscillate less but
// the staleness acts as damping), counts its neighbours' labels and moves at once under the
// hard cap. One pass at the end of an iteration refreshes the remaining entries and
// recounts the cut exactly.
//
// Score of label q for vertex v (Spinner-like, additive):
//     count_q(v) / deg(v) + lam * (1 - size_q / cap),   cap = max(ceil(n/L), floor(balance n/L))
// for L labels. A label with size_q >= cap may not be entered. v moves to the best-scoring
// allowed label when it beats its current one. Candidates: the labels v's neighbours carry,
// its own, and the smallest label (the only zero-count label the penalty can favour).
//
// A phase stops after its iteration budget, when an iteration moves nothing, or when the
// cut has not improved by a relative `tol` on the best so far for `patience` iterations.
//
// levels = 0 is the plain algorithm: one phase with p labels from a balanced random start.
// levels = j > 0 starts with p * 2^j labels (sub-parts of a few vertices: propagation then
// settles on local communities instead of freezing a random p-way mixture, which on real
// graphs leaves ~2x METIS's cut), then j times pairs up labels by a greedy matching on the
// label graph and refines with half as many labels. Same per-edge state, more iterations.
//
// If the final cut is worse than the p-way random start's (not seen in practice) that start
// is handed back instead, so the result is never worse than random. Parts above the cap
// (only possible from a given start, or rounding on tiny graphs) are emptied into allowed
// ones at the end. Single-threaded and deterministic for a given seed.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace sni {
namespace lp {

inline uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// A seeded pseudo-random bijection of [0, n): a 4-round Feistel network on the smallest
// even-bit-width power of two >= n, with cycle walking. No memory, O(1) expected per call.
class Bijection {
  public:
    Bijection(uint64_t n, uint64_t key) : n_(n) {
        int bits = 2;
        while ((uint64_t(1) << bits) < n) bits += 2;
        half_ = bits / 2;
        mask_ = (uint64_t(1) << half_) - 1;
        for (int r = 0; r < 4; ++r) keys_[r] = mix64(key + 0x632BE59BD9B4E019ull * (r + 1));
    }
    uint64_t operator()(uint64_t x) const {
        do {
            x = round_trip(x);
        } while (x >= n_);
        return x;
    }

  private:
    uint64_t round_trip(uint64_t x) const {
        uint64_t l = x >> half_, r = x & mask_;
        for (int i = 0; i < 4; ++i) {
            const uint64_t f = mix64(r ^ keys_[i]) & mask_;
            const uint64_t t = l ^ f;
            l = r;
            r = t;
        }
        return (l << half_) | r;
    }
    uint64_t n_, mask_;
    int half_;
    uint64_t keys_[4];
};

constexpr int64_t kBlock = 64;  // vertices per visiting block (a power of two)

struct Options {
    int64_t num_parts = 2;    // p, the parts wanted
    int64_t levels = 0;       // label halvings: start with p * 2^levels labels (0: plain LP)
    double balance = 1.1;
    double lam = 0.5;
    int64_t max_iter = 50;    // iterations of the first and of the final phase
    int64_t refine_iter = 10; // iterations of each intermediate phase
    int64_t patience = 8;
    double tol = 1e-3;
    int64_t chunks = 8;
    uint64_t seed = 0;
    int64_t use_init = 0;     // part[] already holds the start (ids in [0, num_parts)); levels 0
};

struct Stats {
    int64_t iterations = 0;      // label-propagation iterations run, all phases
    int64_t capacity = 0;        // hard cap on part size (final phase)
    int64_t start_cut = 0;       // cut of the start (random p-way start, or the given init)
    int64_t final_cut = 0;       // cut of the returned assignment
    int64_t restored_start = 0;  // 1 if the random start was handed back (final cut worse)
    int64_t stop_reason = 0;     // final phase: 0 max_iter, 1 no move, 2 plateau, 3 restored
    int64_t entries = 0;         // history entries written
};

// Per-step history, caller-owned: labels in use, cut (CSR entries) and moves per entry.
// An entry is a phase's start (moves = -1: random start or merged labels) or an iteration.
struct History {
    int64_t* labels;
    int64_t* cut;
    int64_t* moves;
    int64_t capacity;
    int64_t size = 0;
    void add(int64_t l, int64_t c, int64_t m) {
        if (size < capacity) {
            labels[size] = l;
            cut[size] = c;
            moves[size] = m;
        }
        ++size;
    }
};

inline int64_t part_cap(int64_t n, int64_t p, double balance) {
    const double ideal = static_cast<double>(n) / static_cast<double>(p);
    return std::max<int64_t>((n + p - 1) / p, static_cast<int64_t>(std::floor(balance * ideal + 1e-9)));
}

inline Bijection start_bijection(int64_t n, uint64_t seed) {
    return Bijection(static_cast<uint64_t>(n), mix64(seed ^ 0x5EED5EED5EED5EEDull));
}

// The balanced random start: part[v] = pi(v) mod p for a seeded bijection pi.
inline void random_start(int64_t n, int64_t p, uint64_t seed, int64_t* part) {
    const Bijection pi = start_bijection(n, seed);
    for (int64_t v = 0; v < n; ++v) part[v] = static_cast<int64_t>(pi(static_cast<uint64_t>(v)) % p);
}

// The cut of random_start(n, p, seed) without storing it.
template <typename I>
int64_t random_start_cut(const int64_t* indptr, const I* indices, int64_t n, int64_t p, uint64_t seed) {
    const Bijection pi = start_bijection(n, seed);
    int64_t cut = 0;
    for (int64_t v = 0; v < n; ++v) {
        const uint64_t pv = pi(static_cast<uint64_t>(v)) % p;
        for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e)
            cut += pi(static_cast<uint64_t>(indices[e])) % p != pv;
    }
    return cut;
}

template <typename I, typename P>
class Propagator {
  public:
    static constexpr uint8_t kStill = 0xFF;  // moved_in_ value: not moved this iteration

    // num_labels: the labels in play in this phase (part ids in [0, num_labels)).
    // On entry dstpart must agree with part (or full_refresh be called).
    Propagator(const int64_t* indptr, const I* indices, int64_t n, P* dstpart, int64_t* part,
               int64_t num_labels, const Options& o)
        : indptr_(indptr), indices_(indices), n_(n), dstpart_(dstpart), part_(part), o_(o),
          p_(num_labels), sizes_(num_labels, 0), counts_(num_labels, 0), moved_in_(n, kStill) {
        touched_.reserve(static_cast<size_t>(std::min<int64_t>(p_, 1024)));
        cap_ = part_cap(n, p_, o.balance);
        inv_cap_ = 1.0 / static_cast<double>(cap_);
        for (int64_t v = 0; v < n_; ++v) ++sizes_[part_[v]];
    }

    int64_t capacity() const { return cap_; }

    // Rewrite all of dstpart from part; returns the cut (CSR entries).
    int64_t full_refresh() {
        int64_t cut = 0;
        for (int64_t v = 0; v < n_; ++v) {
            const P pv = static_cast<P>(part_[v]);
            for (int64_t e = indptr_[v]; e < indptr_[v + 1]; ++e) {
                const P q = static_cast<P>(part_[indices_[e]]);
                dstpart_[e] = q;
                cut += q != pv;
            }
        }
        std::fill(moved_in_.begin(), moved_in_.end(), kStill);
        return cut;
    }

    // End of an iteration: rewrite the entries whose destination moved; returns the cut.
    int64_t refresh() {
        int64_t cut = 0;
        const uint8_t* moved = moved_in_.data();
        for (int64_t v = 0; v < n_; ++v) {
            const P pv = static_cast<P>(part_[v]);
            const int64_t end = indptr_[v + 1];
            for (int64_t e = indptr_[v]; e < end; ++e) {
                const int64_t u = static_cast<int64_t>(indices_[e]);
                P q = dstpart_[e];
                if (moved[u] != kStill) {
                    q = static_cast<P>(part_[u]);
                    dstpart_[e] = q;
                }
                cut += q != pv;
            }
        }
        std::fill(moved_in_.begin(), moved_in_.end(), kStill);
        return cut;
    }

    // One iteration over all vertices in a random order; returns the number of moves and
    // leaves the cut after the iteration in *cut.
    int64_t iterate(uint64_t key, int64_t* cut) {
        const int64_t nblocks = (n_ + kBlock - 1) / kBlock;
        const Bijection block_order(static_cast<uint64_t>(nblocks), key);
        const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>({o_.chunks, nblocks, 254}));
        int64_t moves = 0;
        for (int64_t c = 0; c < chunks; ++c) {
            const int64_t b0 = nblocks * c / chunks, b1 = nblocks * (c + 1) / chunks;
            smallest_ = static_cast<int64_t>(std::min_element(sizes_.begin(), sizes_.end()) - sizes_.begin());
            for (int64_t b = b0; b < b1; ++b) {
                const int64_t block = static_cast<int64_t>(block_order(static_cast<uint64_t>(b)));
                // within a block: v = base + ((a * i + s) mod 64), a odd -> a permutation
                const uint64_t h = mix64(key ^ static_cast<uint64_t>(block) * 0xD1B54A32D192ED03ull);
                const uint64_t a = (h | 1u) & (kBlock - 1), s = (h >> 32) & (kBlock - 1);
                const int64_t base = block * kBlock;
                for (int64_t i = 0; i < kBlock; ++i) {
                    const int64_t v = base + static_cast<int64_t>((a * static_cast<uint64_t>(i) + s) & (kBlock - 1));
                    if (v < n_) moves += visit(v, static_cast<uint8_t>(c));
                }
            }
        }
        if (moves) *cut = refresh();
        return moves;
    }

    // Move vertices out of parts above the cap (possible only when the start violates it,
    // e.g. a given init, or rounding on tiny graphs): each goes to the allowed part most of
    // its neighbours are in, else to the smallest part. Needs dstpart fresh. Returns the
    // number of vertices moved; part is then within the cap and dstpart stale if > 0.
    int64_t enforce_cap() {
        int64_t moved = 0;
        for (int64_t v = 0; v < n_; ++v) {
            const int64_t cur = part_[v];
            if (sizes_[cur] <= cap_) continue;
            int64_t best = -1, best_count = -1;
            for (int64_t e = indptr_[v]; e < indptr_[v + 1]; ++e) ++counts_[dstpart_[e]];
            for (int64_t e = indptr_[v]; e < indptr_[v + 1]; ++e) {
                const int64_t q = dstpart_[e];
                if (q != cur && sizes_[q] < cap_ && counts_[q] > best_count) {
                    best = q;
                    best_count = counts_[q];
                }
            }
            for (int64_t e = indptr_[v]; e < indptr_[v + 1]; ++e) counts_[dstpart_[e]] = 0;
            if (best < 0)
                best = static_cast<int64_t>(std::min_element(sizes_.begin(), sizes_.end()) - sizes_.begin());
            --sizes_[cur];
            ++sizes_[best];
            part_[v] = best;
            ++moved;
        }
        return moved;
    }

  private:
    // Visit v in chunk c: bring v's entries up to date with the moves of earlier chunks
    // (moves of this chunk stay unseen, as if proposed in parallel), score, maybe move.
    int visit(int64_t v, uint8_t c) {
        const int64_t begin = indptr_[v], end = indptr_[v + 1];
        if (begin == end) return 0;
        const uint8_t* moved = moved_in_.data();
        for (int64_t e = begin; e < end; ++e) {
            P q = dstpart_[e];
            const int64_t u = static_cast<int64_t>(indices_[e]);
            if (moved[u] < c) {
                q = static_cast<P>(part_[u]);
                dstpart_[e] = q;
            }
            if (counts_[q]++ == 0) touched_.push_back(static_cast<int32_t>(q));
        }
        const double inv_deg = 1.0 / static_cast<double>(end - begin);
        const int64_t cur = part_[v];
        auto score = [&](int64_t q) {
            return counts_[q] * inv_deg + o_.lam * (1.0 - static_cast<double>(sizes_[q]) * inv_cap_);
        };
        const double cur_score = score(cur);
        double best_score = cur_score;
        int64_t best = cur;
        for (const int32_t q : touched_) {
            if (q == cur || sizes_[q] >= cap_) continue;
            const double s = score(q);
            if (s > best_score) {
                best_score = s;
                best = q;
            }
        }
        if (smallest_ != cur && counts_[smallest_] == 0 && sizes_[smallest_] < cap_) {
            const double s = score(smallest_);
            if (s > best_score) {
                best_score = s;
                best = smallest_;
            }
        }
        for (const int32_t q : touched_) counts_[q] = 0;
        touched_.clear();
        if (best == cur || !(best_score > cur_score + 1e-12)) return 0;
        --sizes_[cur];
        ++sizes_[best];
        part_[v] = best;
        moved_in_[v] = c;
        return 1;
    }

    const int64_t* indptr_;
    const I* indices_;
    int64_t n_;
    P* dstpart_;
    int64_t* part_;
    const Options& o_;
    int64_t p_, cap_ = 0, smallest_ = 0;
    double inv_cap_ = 0.0;
    std::vector<int64_t> sizes_;
    std::vector<int32_t> counts_;
    std::vector<int32_t> touched_;
    std::vector<uint8_t> moved_in_;  // per vertex: the chunk it moved in this iteration
};

// One phase: up to max_iter iterations with `labels` labels from the current part/dstpart
// (consistent on entry; *cut is their cut). Returns the stop reason (0 max_iter, 1 no
// move, 2 plateau); appends one history entry per iteration.
template <typename I, typename P>
int64_t phase(const int64_t* indptr, const I* indices, int64_t n, P* dstpart, int64_t* part,
              int64_t labels, int64_t max_iter, uint64_t phase_key, const Options& o, int64_t* cut,
              History* h, Stats* st) {
    Propagator<I, P> prop(indptr, indices, n, dstpart, part, labels, o);
    st->capacity = prop.capacity();
    int64_t best = *cut, stall = 0;
    for (int64_t it = 0; it < max_iter; ++it) {
        const uint64_t key = mix64(mix64(o.seed * 0x9E3779B97F4A7C15ull + phase_key) + static_cast<uint64_t>(it) + 1);
        const int64_t moves = prop.iterate(key, cut);
        ++st->iterations;
        h->add(labels, *cut, moves);
        if (moves == 0) return 1;
        if (static_cast<double>(*cut) < static_cast<double>(best) * (1.0 - o.tol)) {
            stall = 0;
        } else if (++stall >= o.patience) {
            return 2;
        }
        best = std::min(best, *cut);
    }
    return 0;
}

// Halve the labels: pair them by a greedy matching on the label graph, heaviest pairs first
// (weight: CSR entries between the two labels / their combined size), then relabel part and
// dstpart in place. Labels left without a connected partner are paired smallest with
// largest. Labels are sub-parts of near-equal size, so merged pairs stay within the next
// level's cap. Returns the cut after merging. Scratch: labels^2 uint32 counts (4 MiB for
// 1024 labels) and 8 bytes per connected label pair.
template <typename I, typename P>
int64_t merge_pairs(const int64_t* indptr, int64_t n, P* dstpart, int64_t* part, int64_t labels) {
    const int64_t L = labels;
    std::vector<uint32_t> w(static_cast<size_t>(L * L), 0);
    std::vector<int64_t> sz(static_cast<size_t>(L), 0);
    for (int64_t v = 0; v < n; ++v) {
        ++sz[part[v]];
        uint32_t* row = w.data() + part[v] * L;
        for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
            uint32_t& x = row[dstpart[e]];
            x += x != UINT32_MAX;  // saturating: only the ranking matters
        }
    }
    struct Pair {
        float weight;
        uint16_t a, b;
    };
    std::vector<Pair> pairs;
    for (int64_t a = 0; a < L; ++a)
        for (int64_t b = a + 1; b < L; ++b) {
            const double x = static_cast<double>(w[a * L + b]) + static_cast<double>(w[b * L + a]);
            if (x > 0)
                pairs.push_back({static_cast<float>(x / static_cast<double>(std::max<int64_t>(1, sz[a] + sz[b]))),
                                 static_cast<uint16_t>(a), static_cast<uint16_t>(b)});
        }
    std::vector<uint32_t>().swap(w);
    std::stable_sort(pairs.begin(), pairs.end(),
                     [](const Pair& x, const Pair& y) { return x.weight > y.weight; });
    std::vector<int64_t> mate(static_cast<size_t>(L), -1), relabel(static_cast<size_t>(L), -1);
    for (const Pair& pr : pairs) {
        if (mate[pr.a] < 0 && mate[pr.b] < 0) {
            mate[pr.a] = pr.b;
            mate[pr.b] = pr.a;
        }
    }
    std::vector<Pair>().swap(pairs);
    std::vector<int64_t> single;
    for (int64_t a = 0; a < L; ++a)
        if (mate[a] < 0) single.push_back(a);
    std::stable_sort(single.begin(), single.end(), [&](int64_t x, int64_t y) { return sz[x] < sz[y]; });
    for (size_t i = 0, j = single.size(); i + 1 < j; ++i, --j) {
        mate[single[i]] = single[j - 1];
        mate[single[j - 1]] = single[i];
    }
    int64_t next = 0;
    for (int64_t a = 0; a < L; ++a) {
        if (relabel[a] >= 0) continue;
        relabel[a] = next;
        if (mate[a] >= 0) relabel[mate[a]] = next;
        ++next;
    }
    int64_t cut = 0;
    for (int64_t v = 0; v < n; ++v) {
        const P pv = static_cast<P>(relabel[part[v]]);
        part[v] = pv;
        for (int64_t e = indptr[v]; e < indptr[v + 1]; ++e) {
            const P q = static_cast<P>(relabel[dstpart[e]]);
            dstpart[e] = q;
            cut += q != pv;
        }
    }
    return cut;
}

// Runs the partitioner; part (n) receives the result (and holds the start if use_init).
// Plain mode (levels 0): one phase with p labels from a balanced random start. With levels
// j > 0 the first phase runs with p * 2^j labels (small sub-parts: LP then finds local
// communities instead of freezing a random p-way mixture), then j times: merge label pairs,
// refine with half the labels (refine_iter iterations; max_iter for the final p-way phase).
template <typename I, typename P>
void run(const int64_t* indptr, const I* indices, int64_t n, P* dstpart, int64_t* part,
         const Options& o, History* h, Stats* st) {
    const int64_t p = o.num_parts;
    const int64_t levels = (o.use_init || p <= 1) ? 0 : o.levels;
    int64_t labels = p << levels;
    if (!o.use_init) random_start(n, labels, o.seed, part);
    st->iterations = 0;
    st->restored_start = 0;
    st->stop_reason = 0;
    int64_t cut;
    {
        Propagator<I, P> prop(indptr, indices, n, dstpart, part, labels, o);
        st->capacity = prop.capacity();
        cut = prop.full_refresh();
    }
    h->add(labels, cut, -1);
    if (labels == p) st->start_cut = cut;
    if (p > 1) {
        st->stop_reason = phase(indptr, indices, n, dstpart, part, labels, o.max_iter, 0, o, &cut, h, st);
        for (int64_t level = 1; level <= levels; ++level) {
            cut = merge_pairs<I, P>(indptr, n, dstpart, part, labels);
            labels /= 2;
            h->add(labels, cut, -1);
            st->stop_reason = phase(indptr, indices, n, dstpart, part, labels,
                                    labels == p ? o.max_iter : o.refine_iter, level, o, &cut, h, st);
        }
    } else {
        st->capacity = n;
    }
    {
        Propagator<I, P> prop(indptr, indices, n, dstpart, part, p, o);
        if (prop.enforce_cap() > 0) {
            cut = prop.full_refresh();
            h->add(p, cut, -1);
        }
    }
    if (levels > 0) st->start_cut = random_start_cut(indptr, indices, n, p, o.seed);
    st->final_cut = cut;
    if (!o.use_init && cut > st->start_cut) {  // never hand back something worse than random
        random_start(n, p, o.seed, part);
        st->final_cut = st->start_cut;
        st->restored_start = 1;
        st->stop_reason = 3;
    }
    st->entries = h->size;
}

// Type-dispatching entry point: idx_bytes 4 or 8, part_bytes 1, 2 or 4 (dstpart's type).
// Returns 0, or -1 for an unsupported combination.
inline int run_dispatch(const int64_t* indptr, const void* indices, int idx_bytes, int64_t n,
                        void* dstpart, int part_bytes, int64_t* part, const Options& o,
                        History* h, Stats* st) {
#define SNI_LP_CASE(IB, PB, I, P)                                                                  \
    if (idx_bytes == IB && part_bytes == PB) {                                                     \
        run<I, P>(indptr, static_cast<const I*>(indices), n, static_cast<P*>(dstpart), part, o, h, \
                  st);                                                                             \
        return 0;                                                                                  \
    }
    SNI_LP_CASE(4, 1, int32_t, uint8_t)
    SNI_LP_CASE(4, 2, int32_t, uint16_t)
    SNI_LP_CASE(4, 4, int32_t, int32_t)
    SNI_LP_CASE(8, 1, int64_t, uint8_t)
    SNI_LP_CASE(8, 2, int64_t, uint16_t)
    SNI_LP_CASE(8, 4, int64_t, int32_t)
#undef SNI_LP_CASE
    return -1;
}

// ---------------------------------------------------------------- CSR helpers

// Checks a CSR: indptr[0] == 0, non-decreasing, indptr[n] == m, indices in [0, n).
// Returns 0 if valid; otherwise a code and the offending position in *where:
// 1 indptr[0] != 0, 2 indptr decreases at *where, 3 indptr[n] != m, 4 index out of range at *where.
template <typename I>
int check_csr(const int64_t* indptr, const I* indices, int64_t n, int64_t m, int64_t* where) {
    if (indptr[0] != 0) {
        *where = 0;
        return 1;
    }
    for (int64_t v = 0; v < n; ++v) {
        if (indptr[v + 1] < indptr[v]) {
            *where = v;
            return 2;
        }
    }
    if (indptr[n] != m) {
        *where = n;
        return 3;
    }
    for (int64_t e = 0; e < m; ++e) {
        const int64_t u = static_cast<int64_t>(indices[e]);
        if (u < 0 || u >= n) {
            *where = e;
            return 4;
        }
    }
    return 0;
}

inline int check_csr_dispatch(const int64_t* indptr, const void* indices, int idx_bytes, int64_t n,
                              int64_t m, int64_t* where) {
    if (idx_bytes == 4) return check_csr(indptr, static_cast<const int32_t*>(indices), n, m, where);
    return check_csr(indptr, static_cast<const int64_t*>(indices), n, m, where);
}

// COO (src, dst) -> CSR degrees. Fills indptr (n + 1) with row offsets; with `both` each
// edge also counts as dst -> src. Returns 0, or 1 + position of the first id out of
// [0, n) (in *where). Sets *sorted to whether src is non-decreasing.
template <typename I>
int coo_indptr(const I* src, const I* dst, int64_t m, int64_t n, bool both, int64_t* indptr,
               int64_t* where, int* sorted) {
    std::fill(indptr, indptr + n + 1, 0);
    int s = 1;
    for (int64_t e = 0; e < m; ++e) {
        const int64_t a = static_cast<int64_t>(src[e]), b = static_cast<int64_t>(dst[e]);
        if (a < 0 || a >= n || b < 0 || b >= n) {
            *where = e;
            return 1;
        }
        if (e && static_cast<int64_t>(src[e - 1]) > a) s = 0;
        ++indptr[a + 1];
        if (both) ++indptr[b + 1];
    }
    for (int64_t v = 0; v < n; ++v) indptr[v + 1] += indptr[v];
    *sorted = s;
    return 0;
}

// Counting-sort scatter of COO into CSR columns (indices of length indptr[n]), keeping the
// input order within a row. Uses one cursor array of n int64.
template <typename I, typename J>
void coo_scatter(const I* src, const I* dst, int64_t m, int64_t n, bool both, const int64_t* indptr,
                 J* indices) {
    std::vector<int64_t> cursor(indptr, indptr + n);
    for (int64_t e = 0; e < m; ++e) {
        const int64_t a = static_cast<int64_t>(src[e]), b = static_cast<int64_t>(dst[e]);
        indices[cursor[a]++] = static_cast<J>(b);
        if (both) indices[cursor[b]++] = static_cast<J>(a);
    }
}

inline int coo_indptr_dispatch(const void* src, const void* dst, int id_bytes, int64_t m, int64_t n,
                               bool both, int64_t* indptr, int64_t* where, int* sorted) {
    if (id_bytes == 4)
        return coo_indptr(static_cast<const int32_t*>(src), static_cast<const int32_t*>(dst), m, n, both,
                          indptr, where, sorted);
    return coo_indptr(static_cast<const int64_t*>(src), static_cast<const int64_t*>(dst), m, n, both,
                      indptr, where, sorted);
}

inline void coo_scatter_dispatch(const void* src, const void* dst, int id_bytes, int64_t m, int64_t n,
                                 bool both, const int64_t* indptr, void* indices, int out_bytes) {
    if (id_bytes == 4 && out_bytes == 4)
        coo_scatter(static_cast<const int32_t*>(src), static_cast<const int32_t*>(dst), m, n, both, indptr,
                    static_cast<int32_t*>(indices));
    else if (id_bytes == 4)
        coo_scatter(static_cast<const int32_t*>(src), static_cast<const int32_t*>(dst), m, n, both, indptr,
                    static_cast<int64_t*>(indices));
    else if (out_bytes == 4)
        coo_scatter(static_cast<const int64_t*>(src), static_cast<const int64_t*>(dst), m, n, both, indptr,
                    static_cast<int32_t*>(indices));
    else
        coo_scatter(static_cast<const int64_t*>(src), static_cast<const int64_t*>(dst), m, n, both, indptr,
                    static_cast<int64_t*>(indices));
}

}  // namespace lp
}  // namespace sni
