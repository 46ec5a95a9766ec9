// The drift transfer's arithmetic (dgl_sni.sni.transfer), each part in one call.
//
// A sync epoch fits the affine map M ((d+1) x d) taking the owned rows of the last sync to
// this sync's, [base, 1] @ M ~ rows, by least squares with a ridge; moves the sampled halo
// rows by it; scores them against the fresh rows; and takes this sync's rows as the next
// base. In numpy that was some forty calls per layer on arrays of a few hundred by 17 (a
// Cora partition), whose per-call cost, not their arithmetic, was the time: about 0.35 ms
// a layer in a training run on 2 shared cores. Here:
//
//   drift_fit    the fit rows (every stride-th owned row) as float64, the products
//                base^T [rows, 1] and [rows, 1]^T [rows, 1] over them (tiles whose sums
//                stay in registers), then M from the base's Cholesky factor, and the new
//                base's factor (its Gram matrix plus ridge * max(trace / (d+1), 1e-12) on
//                the diagonal);
//   drift_move   the sampled halo rows moved by M (float64 sums, clamped at 0 where the
//                base rows are all non-negative, rounded to float32);
//   drift_score  the per-row and per-layer decayed errors of the moved and the agent's rows
//                against the fresh ones, and the rows' score counts.
//
// The factor is that of the Gram matrix, which the ridge keeps positive definite; a
// 17 x 17 Cholesky solve is a few thousand flops.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace sni {

// In place: the lower triangle of a (n x n, row-major; only the lower triangle is read)
// becomes L with a = L L^T. False where a is not positive definite (or holds a NaN).
inline bool cholesky_lower(double* a, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
        double s = a[j * n + j];
        for (int64_t k = 0; k < j; ++k) s -= a[j * n + k] * a[j * n + k];
        if (!(s > 0.0)) return false;
        const double l = std::sqrt(s);
        a[j * n + j] = l;
        for (int64_t i = j + 1; i < n; ++i) {
            double t = a[i * n + j];
            for (int64_t k = 0; k < j; ++k) t -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = t / l;
        }
        for (int64_t k = j + 1; k < n; ++k) a[j * n + k] = 0.0;
    }
    return true;
}

// b (n x m, row-major) becomes (L L^T)^-1 b.
inline void cholesky_solve(const double* l, int64_t n, double* b, int64_t m) {
    for (int64_t c = 0; c < m; ++c) {
        for (int64_t i = 0; i < n; ++i) {  // L y = b
            double t = b[i * m + c];
            for (int64_t k = 0; k < i; ++k) t -= l[i * n + k] * b[k * m + c];
            b[i * m + c] = t / l[i * n + i];
        }
        for (int64_t i = n - 1; i >= 0; --i) {  // L^T x = y
            double t = b[i * m + c];
            for (int64_t k = i + 1; k < n; ++k) t -= l[k * n + i] * b[k * m + c];
            b[i * m + c] = t / l[i * n + i];
        }
    }
}

typedef double d4 __attribute__((vector_size(32), aligned(8)));  // 4 lanes, unaligned loads

// out[a][b] += sum_i A[i][a] B[i][b] for a < na, b < nb (A: [n, lda], B: [n, ldb], out:
// [na, nb], all row-major), over tiles of 2 columns of A by 8 of B whose sums stay in
// registers while a block of rows (kRowBlock, in cache) streams by; columns of B past the
// last 8 go one at a time. With lower, only the entries b <= a are needed (tiles past them
// are skipped; the entries of a computed tile above the diagonal are summed too).
constexpr int64_t kRowBlock = 512;

template <bool Two>
__attribute__((always_inline)) inline void tn_tile(const double* A, int64_t lda, int64_t a, const double* B,
                                                   int64_t ldb, int64_t b, int64_t n, double* out, int64_t nb) {
    d4 s00{}, s01{}, s10{}, s11{};
    for (int64_t i = 0; i < n; ++i) {
        const double* br = B + i * ldb + b;
        d4 b0, b1;
        std::memcpy(&b0, br, sizeof(d4));
        std::memcpy(&b1, br + 4, sizeof(d4));
        const double x0 = A[i * lda + a];
        s00 += x0 * b0;
        s01 += x0 * b1;
        if (Two) {
            const double x1 = A[i * lda + a + 1];
            s10 += x1 * b0;
            s11 += x1 * b1;
        }
    }
    double* o = out + a * nb + b;
    for (int l = 0; l < 4; ++l) {
        o[l] += s00[l];
        o[4 + l] += s01[l];
        if (Two) {
            o[nb + l] += s10[l];
            o[nb + 4 + l] += s11[l];
        }
    }
}

inline void tn_block(const double* A, int64_t lda, int64_t na, const double* B, int64_t ldb, int64_t nb,
                     int64_t n, double* out, bool lower) {
    const int64_t nb8 = nb / 8 * 8;
    for (int64_t a = 0; a < na; a += 2) {
        const bool two = a + 1 < na;
        for (int64_t b = 0; b < nb8 && !(lower && b > a + 1); b += 8) {
            if (two) {
                tn_tile<true>(A, lda, a, B, ldb, b, n, out, nb);
            } else {
                tn_tile<false>(A, lda, a, B, ldb, b, n, out, nb);
            }
        }
        for (int64_t b = nb8; b < nb && !(lower && b > a + 1); ++b) {
            double t0 = 0.0, t1 = 0.0;
            for (int64_t i = 0; i < n; ++i) {
                const double y = B[i * ldb + b];
                t0 += A[i * lda + a] * y;
                if (two) t1 += A[i * lda + a + 1] * y;
            }
            out[a * nb + b] += t0;
            if (two) out[(a + 1) * nb + b] += t1;
        }
    }
}

inline void tn_products(const double* A, int64_t lda, int64_t na, const double* B, int64_t ldb, int64_t nb,
                        int64_t n, double* out, bool lower) {
    for (int64_t i = 0; i < n; i += kRowBlock) {
        const int64_t rows = n - i < kRowBlock ? n - i : kRowBlock;
        tn_block(A + i * lda, lda, na, B + i * ldb, ldb, nb, rows, out, lower);
    }
}

// The fit rows are owned rows 0, stride, 2 stride, ... (nf of them, d floats each). With
// base ([nf, d+1]) and base_chol ((d+1)^2): m_out ((d+1) x d) = the map. With rows_out
// ([nf, d+1]) and chol_out ((d+1)^2): the fit rows as float64 with a trailing 1, and their
// factor. Returns -1 where a factor cannot be made (not positive definite), else 1 where
// every fit value is >= 0 and 0 where one is not.
__attribute__((target_clones("avx2", "default")))
inline int drift_fit(const float* owned, int64_t d, int64_t stride, int64_t nf, const double* base,
                     const double* base_chol, double* m_out, double* rows_out, double* chol_out, double ridge) {
    const int64_t w = d + 1;
    std::vector<double> own_rows, cross, gram;
    double* r = rows_out;
    if (!r) {
        own_rows.resize(static_cast<size_t>(nf * w));
        r = own_rows.data();
    }
    bool pos = true;
    for (int64_t i = 0; i < nf; ++i) {
        const float* x = owned + i * stride * d;
        double* ri = r + i * w;
        for (int64_t b = 0; b < d; ++b) {
            ri[b] = static_cast<double>(x[b]);
            pos = pos && x[b] >= 0.0f;
        }
        ri[d] = 1.0;
    }
    if (base) {
        cross.assign(static_cast<size_t>(w * d), 0.0);
        tn_products(base, w, w, r, w, d, nf, cross.data(), false);
    }
    if (chol_out) {
        gram.assign(static_cast<size_t>(w * w), 0.0);
        tn_products(r, w, w, r, w, w, nf, gram.data(), true);
    }
    if (base) {
        for (int64_t k = 0; k < w * d; ++k) m_out[k] = cross[static_cast<size_t>(k)];
        cholesky_solve(base_chol, w, m_out, d);
    }
    if (chol_out) {
        double trace = 0.0;
        for (int64_t a = 0; a < w; ++a) trace += gram[static_cast<size_t>(a * w + a)];
        const double mean = trace / static_cast<double>(w);
        const double add = ridge * (mean > 1e-12 ? mean : 1e-12);
        for (int64_t a = 0; a < w; ++a) gram[static_cast<size_t>(a * w + a)] += add;
        if (!cholesky_lower(gram.data(), w)) return -1;
        for (int64_t k = 0; k < w * w; ++k) chol_out[k] = gram[static_cast<size_t>(k)];
    }
    return pos && nf > 0 ? 1 : 0;
}

// out ([ns, d]) = the rows cache[sampled] moved by m ((d+1) x d), clamped at 0 with nonneg.
inline void drift_move(const float* cache, int64_t d, const int64_t* sampled, int64_t ns, const double* m,
                       bool nonneg, float* out) {
    std::vector<double> acc(static_cast<size_t>(d));
    for (int64_t k = 0; k < ns; ++k) {
        const float* c = cache + sampled[k] * d;
        for (int64_t b = 0; b < d; ++b) acc[static_cast<size_t>(b)] = 0.0;
        for (int64_t a = 0; a < d; ++a) {
            const double ca = static_cast<double>(c[a]);
            const double* ma = m + a * d;
            for (int64_t b = 0; b < d; ++b) acc[static_cast<size_t>(b)] += ca * ma[b];
        }
        for (int64_t b = 0; b < d; ++b) {
            double v = acc[static_cast<size_t>(b)] + m[d * d + b];
            if (nonneg && v < 0.0) v = 0.0;
            out[k * d + b] = static_cast<float>(v);
        }
    }
}

inline double row_distance(const float* a, const float* b, int64_t d) {
    double s = 0.0;
    for (int64_t j = 0; j < d; ++j) {
        const double e = static_cast<double>(a[j]) - static_cast<double>(b[j]);
        s += e * e;
    }
    return std::sqrt(s);
}

// One sync's scores. moved: [ns, d] (the sampled rows transferred); agent, fresh: [*, d]
// rows indexed by sampled. err: [2, ns] decayed errors (transferred, agent's), scores: [ns]
// score counts, layer: the decayed (served as chosen, agent's) sums, seeded where !has_layer.
// A row counts as chosen (served transferred) by the state before this score: scores >=
// min_scores and its transferred error below margin times the agent's.
inline void drift_score(const float* moved, const float* agent, const float* fresh, int64_t d,
                        const int64_t* sampled, int64_t ns, double decay, double margin, int64_t min_scores,
                        double* err, int64_t* scores, double* layer, bool has_layer) {
    double agent_sum = 0.0, served_sum = 0.0;
    for (int64_t k = 0; k < ns; ++k) {
        const int64_t i = sampled[k];
        const double et = row_distance(moved + k * d, fresh + i * d, d);
        const double ea = row_distance(agent + i * d, fresh + i * d, d);
        const bool chosen = scores[k] >= min_scores && err[k] < margin * err[ns + k];
        agent_sum += ea;
        served_sum += chosen ? et : ea;
        if (scores[k] == 0) {
            err[k] = et;
            err[ns + k] = ea;
        } else {
            err[k] = decay * err[k] + (1.0 - decay) * et;
            err[ns + k] = decay * err[ns + k] + (1.0 - decay) * ea;
        }
        scores[k] += 1;
    }
    if (has_layer) {
        layer[0] = decay * layer[0] + (1.0 - decay) * served_sum;
        layer[1] = decay * layer[1] + (1.0 - decay) * agent_sum;
    } else {
        layer[0] = served_sum;
        layer[1] = agent_sum;
    }
}

}  // namespace sni
