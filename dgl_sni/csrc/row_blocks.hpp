// Blocks of rows at a width per row (dgl_sni.halo.bit_choice): one message of n rows of d
// values. The block starts with the widths, 2 bits per row (code 0: 2 bits, 1: 4, 2: 8; row r
// in bits 2 (r % 4) of byte r / 4), then the 8-bit rows, the 4-bit rows and the 2-bit rows,
// each group in message order, each row as row_codec.hpp encodes it at its width. Row r is
// rounded with the uniforms dither[r d .. r d + d), whatever its width.
#pragma once
#include <cstdint>
#include <cstring>

#include "row_codec.hpp"

namespace sni {

inline int64_t block_row_width(int64_t d, int bits) { return (d * bits + 7) / 8 + 8; }
inline int code_bits(int code) { return 2 << code; }  // 0: 2, 1: 4, 2: 8
inline int row_code_of(const uint8_t* block, int64_t r) { return (block[r / 4] >> (2 * (r % 4))) & 3; }

// Where each width's group starts (start[code]) for rows of the given codes (counts per code).
inline int64_t block_starts(int64_t n, int64_t d, const int64_t count[3], int64_t start[3]) {
    start[2] = (n + 3) / 4;
    start[1] = start[2] + count[2] * block_row_width(d, 8);
    start[0] = start[1] + count[1] * block_row_width(d, 4);
    return start[0] + count[0] * block_row_width(d, 2);  // the block's size
}

// The group starts of a block of `size` bytes; false where a width code is 3 or the size is
// not the one its widths give.
inline bool block_layout(const uint8_t* block, int64_t size, int64_t n, int64_t d, int64_t start[3]) {
    if (size < (n + 3) / 4) return false;
    int64_t count[3] = {0, 0, 0};
    for (int64_t r = 0; r < n; ++r) {
        const int c = row_code_of(block, r);
        if (c == 3) return false;
        ++count[c];
    }
    return block_starts(n, d, count, start) == size;
}

// codes: a width code (0, 1, 2) per row; out: the block's size (block_starts) bytes.
inline void encode_block(const float* x, int64_t n, int64_t d, const uint8_t* codes, const float* dither,
                         uint8_t* out) {
    int64_t count[3] = {0, 0, 0}, at[3];
    for (int64_t r = 0; r < n; ++r) ++count[codes[r]];
    block_starts(n, d, count, at);
    std::memset(out, 0, static_cast<size_t>((n + 3) / 4));
    for (int64_t r = 0; r < n; ++r) {
        const int c = codes[r], bits = code_bits(c);
        const int64_t width = block_row_width(d, bits);
        out[r / 4] = static_cast<uint8_t>(out[r / 4] | (c << (2 * (r % 4))));
        encode_row(x + r * d, d, bits, dither + r * d, out + at[c], width - 8);
        at[c] += width;
    }
}

// out[r, j] = lo + c * s of row r, float32 (start: block_layout's).
inline void decode_block(const uint8_t* block, int64_t n, int64_t d, const int64_t start[3], float* out) {
    int64_t at[3] = {start[0], start[1], start[2]};
    for (int64_t r = 0; r < n; ++r) {
        const int c = row_code_of(block, r), bits = code_bits(c);
        const int64_t width = block_row_width(d, bits);
        decode_row(block + at[c], d, bits, width, out + r * d);
        at[c] += width;
    }
}

// target[offsets[r], :, j] += lo + c * s of row r, in float64 pairs ([rows, 2, d], row_accumulate.hpp).
inline void accumulate_block(const uint8_t* block, int64_t n, int64_t d, const int64_t start[3],
                             const int64_t* offsets, double* target) {
    int64_t at[3] = {start[0], start[1], start[2]};
    for (int64_t r = 0; r < n; ++r) {
        const int c = row_code_of(block, r), bits = code_bits(c);
        const int64_t width = block_row_width(d, bits);
        accumulate_row(block + at[c], d, bits, width, target + offsets[r] * 2 * d);
        at[c] += width;
    }
}

}  // namespace sni
