// The owner's add of pushed gradient rows into its float64 shard, one pass per row.
//
// A shard row is a pair of float64 blocks, sum then error ([2, d] per row): each value x is
// added to its element with an error-free sum (Knuth's TwoSum: s' = s + x rounded, and the
// rounding e = (s - (s' - b)) + (x - b), b = s' - s, exactly), and e into the error block.
// The pair's total s + err is then the exact sum of every value added, up to the error
// block's own rounding (a part in 2^53 of the errors, themselves below half a float64 unit
// of the sum per value), so the float32 read of a row does not depend on the order the
// contributions arrived in, however far their magnitudes lie apart. A plain float64 sum is
// order-free only while a row's float32 contributions lie within about 2^29 of each other;
// beyond, several workers' pushes arriving in another order round the last bit differently.
// Rows are added in the order given. torch's CPU index_add_ on a 2-d shard sorts the
// offsets on every call (a radix sort): 20% of a server's samples at interval 1 on the
// 500k-node graph; this loop does not.
#pragma once
#include <cstdint>

namespace sni {

// s += x with its rounding error added into e (the compiled flags keep the four operations
// as written: no reassociation, no contraction; see dpu_agent/csrc/cxxflags.txt).
inline void two_sum_into(double& s, double& e, double x) {
    const double t = s + x;
    const double b = t - s;
    e += (s - (t - b)) + (x - b);
    s = t;
}

// One row's values v[j] (float or double) into the pair row at t (sums t[0..d), errors t[d..2d)).
template <typename T>
inline void accumulate_pair_row(const T* v, int64_t d, double* t) {
    double* err = t + d;
    for (int64_t j = 0; j < d; ++j) two_sum_into(t[j], err[j], static_cast<double>(v[j]));
}

// target[offsets[r]] += x[r] (target: [rows, 2, d] pairs).
inline void accumulate_float_rows(const float* x, int64_t n, int64_t d, const int64_t* offsets, double* target) {
    for (int64_t r = 0; r < n; ++r) accumulate_pair_row(x + r * d, d, target + offsets[r] * 2 * d);
}

}  // namespace sni
