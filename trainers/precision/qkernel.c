/* Fused fake quantization for the CPU training step: one pass for a scaling group's amax
 * and one for scale, round and dequantize, instead of a dozen torch ops each.
 *
 * Every result is bit-identical to the torch path in quantize.py, nvfp4_variants.py, scaling.py and
 * formats.py (tests/trainers/precision/test_qkernel.py checks each mode against it), so
 * the arithmetic follows that path operation by operation, in float32:
 *   - a tensor divided by a Python scalar divides by the scalar rounded to float32;
 *   - `fmax / tensor` is torch's reciprocal, then a multiply;
 *   - RNE onto the grid is the magic-number add and subtract (formats._rne).
 * Compile with -ffp-contract=off: a fused multiply-add would round once instead of twice.
 * kernels.py builds and loads this file; nothing here touches Python or torch. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define EXPONENT 0x7F800000u
#define SIGN 0x80000000u
#define MANTISSA 0x007FFFFFu
#define HALF_MANTISSA 0x00400000u
#define F32_MAX 3.4028234663852886e+38

enum Mode {
    GIVEN = 0,          /* one FP32 scale from the caller: y = x * s, core = q */
    TENSOR = 1,         /* tensorwise current scaling fmax / amax: y = x * s, core = q */
    BLOCK_FP32 = 2,     /* per tile s = fmax / amax: y = x * s, core = q / s */
    BLOCK_POW2 = 3,     /* the same with s rounded down to a power of two */
    MX_FLOOR = 4,       /* E8M0 d = 2^(floor(log2 amax) - emax): y = x / d, core = q * d */
    MX_RCEIL = 5,       /* E8M0 d = 2^ceil(log2(amax / fmax)) */
    NVFP4 = 6,          /* E4M3 block scale s_b under the FP32 global s_g: y = x / (s_b s_g), core = q * s_b */
    NVFP4_CLAMPED = 7,  /* the same with s_b >= 2^-6 */
    NVFP4_4OVER6 = 8,   /* NVFP4 with s_b to 6 or to 4 per tile, the smaller squared error (nvfp4_variants.nvfp4_4over6) */
    NVFP4_ROWSCALED = 9,  /* 1-D blocks, an encode scale S per row: s_b = e4m3(amax_b / 6 * S), y = x / (s_b / S),
                           * core = q * s_b, S to scales[row] (nvfp4_variants.nvfp4_rowscaled) */
    /* 4-over-6's other conventions (operands.FOUR_OVER_SIX): the absolute error picks, the
     * global scale is amax / (256 * 6), or both; run as NVFP4_4OVER6 with Ctx.mae set */
    NVFP4_4OVER6_MAE = 10,
    NVFP4_4OVER6_256 = 11,
    NVFP4_4OVER6_MAE_256 = 12,
};

static inline uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* formats._rne: clamp (NaN stays), then (y + C) - C with C = 1.5 * 2^23 * ulp(y), and
 * the sign of y or-ed back in. Unsigned arithmetic wraps as torch's int32 does. */
static inline float rne(float y, float fmax, uint32_t emin_bits, uint32_t offset) {
    y = y < -fmax ? -fmax : y;
    y = y > fmax ? fmax : y;
    uint32_t e = bits_of(y) & EXPONENT;
    e = e < emin_bits ? emin_bits : e;
    float c = float_of(e + offset);
    float r = (y + c) - c;
    return float_of(bits_of(r) | (bits_of(y) & SIGN));
}

/* formats.stochastic_round: floor(|y| / ulp + u) * ulp, clamped at the max, signed. */
static inline float sround(float y, float u, float fmax, uint32_t emin_bits, uint32_t mshift) {
    float a = fabsf(y);
    uint32_t e = bits_of(a) & EXPONENT;
    e = e < emin_bits ? emin_bits : e;
    float ulp = float_of(e - mshift);
    float q = floorf(a / ulp + u) * ulp;
    q = q > fmax ? fmax : q;
    return float_of(bits_of(q) | (bits_of(y) & SIGN));
}

/* max |x| over a tile as float32 bits: for non-negative floats the integer order is the
 * float order, and every NaN lies above inf (the caller treats > EXPONENT as NaN). */
static uint32_t tile_amax(const float *x, int64_t cols, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    uint32_t m = 0;
    for (int64_t i = r0; i < r1; i++) {
        const uint32_t *row = (const uint32_t *)(x + i * cols);
        for (int64_t j = c0; j < c1; j++) {
            uint32_t a = row[j] & ~SIGN;
            m = a > m ? a : m;
        }
    }
    return m;
}

static inline float amax_float(uint32_t bits) {
    return bits > EXPONENT ? NAN : float_of(bits);
}

/* Constants of one call. */
typedef struct {
    float fmax, s_g32, fp32_floor;
    int mode, emax_elem;
    uint32_t emin_bits, offset, mshift;
    float nv_max;  /* the E2M1 value an NVFP4 block scale maps the block amax to: 6 (or 4) */
    float s_row;   /* NVFP4_ROWSCALED: the current row's encode scale S */
    int mae;       /* 4-over-6: the sum of absolute errors picks (else of squared errors) */
} Ctx;

/* The scale of one block from its amax bits (block modes): y = x * pre (in 0) or
 * x / pre (in 1); core = q / post (out 1) or q * post (out 2). Returns in. */
static inline int block_scale(const Ctx *k, uint32_t ab, float *pre, float *post) {
    float a = amax_float(ab);
    if (k->mode == BLOCK_FP32 || k->mode == BLOCK_POW2) {  /* scaling.block_fp32_scale */
        a = (isnan(a) || isinf(a)) ? k->fmax : a;
        a = a < k->fp32_floor ? k->fp32_floor : a;
        float s = (1.0f / a) * k->fmax;  /* torch's `fmax / tensor` */
        if (k->mode == BLOCK_POW2) s = float_of(bits_of(s) & ~MANTISSA);
        *pre = s, *post = s;
        return 0;
    }
    if (k->mode == MX_FLOOR || k->mode == MX_RCEIL) {  /* scaling.e8m0_scale */
        int32_t biased;
        if (k->mode == MX_FLOOR) {
            biased = (int32_t)(ab >> 23) - k->emax_elem;  /* NaN: 255, as torch's */
        } else {
            uint32_t q = bits_of(a / k->fmax);
            biased = ((int32_t)q >> 23) + ((q & MANTISSA) != 0);
        }
        biased = biased < 1 ? 1 : biased > 254 ? 254 : biased;
        float d = float_of((uint32_t)biased << 23);
        *pre = d, *post = d;
        return 1;
    }
    /* scaling.nvfp4_block_scale: a NaN or inf amax counts as the float32 max */
    a = (isnan(a) || isinf(a)) ? (float)F32_MAX : a;
    if (k->mode == NVFP4_ROWSCALED) {  /* nvfp4_variants.nvfp4_rowscaled */
        float s_b = rne((a / 6.0f) * k->s_row, 448.0f, (uint32_t)(-6 + 127) << 23,
                        ((uint32_t)(23 - 3) << 23) + HALF_MANTISSA);
        float d = s_b / k->s_row;
        *pre = d == 0.0f ? INFINITY : d, *post = s_b;
        return 1;
    }
    float s_b = rne((a / k->nv_max) / k->s_g32, 448.0f, (uint32_t)(-6 + 127) << 23,
                    ((uint32_t)(23 - 3) << 23) + HALF_MANTISSA);
    if (k->mode == NVFP4_CLAMPED && s_b < 0.015625f) s_b = 0.015625f;
    float d = s_b * k->s_g32;
    *pre = d == 0.0f ? INFINITY : d, *post = s_b;
    return 1;
}

/* One element: scale, round, dequantize (in/out as in block_scale; out 0: core = q). */
static inline __attribute__((always_inline)) float quant1(
    const Ctx *k, float x, float pre, float post, const float *u, const int in, const int out) {
    float y = in ? x / pre : x * pre;
    float q = u ? sround(y, *u, k->fmax, k->emin_bits, k->mshift) : rne(y, k->fmax, k->emin_bits, k->offset);
    return out == 0 ? q : out == 1 ? q / post : q * post;
}

static inline void to_bf16(const float *c, uint16_t *b, int64_t n) {
    const uint32_t *cb = (const uint32_t *)c;
    for (int64_t j = 0; j < n; j++) b[j] = (uint16_t)(cb[j] >> 16);  /* exact: truncation */
}

/* One tile of a row-major tensor, with constant in/out/sr: each combination compiles to
 * its own vectorized loop. */
static inline __attribute__((always_inline)) void tile(
    const Ctx *k, const float *x, const float *u, float *core, int64_t cols,
    int64_t r0, int64_t r1, int64_t c0, int64_t c1, float pre, float post,
    const int in, const int out, const int sr) {
    for (int64_t i = r0; i < r1; i++) {
        const float *xi = x + i * cols, *ui = sr ? u + i * cols : NULL;
        float *ci = core + i * cols;
        for (int64_t j = c0; j < c1; j++)
            ci[j] = quant1(k, xi[j], pre, post, sr ? ui + j : NULL, in, out);
    }
}

/* The squared (or with mae absolute) error of one candidate over a tile, in double
 * (nvfp4_variants.nvfp4_4over6: the float32 difference between (q * s_b) * s_g and x,
 * squared or made absolute and summed in double). */
#define ERR_CHUNK 64
static double tile_err(const Ctx *k, const float *x, const float *u, int64_t cols, int64_t r0,
                       int64_t r1, int64_t c0, int64_t c1, float pre, float post) {
    double e = 0.0;
    float d[ERR_CHUNK];
    const float s_g = k->s_g32;
    for (int64_t i = r0; i < r1; i++)
        for (int64_t j0 = c0; j0 < c1; j0 += ERR_CHUNK) {
            const int64_t m = c1 - j0 < ERR_CHUNK ? c1 - j0 : ERR_CHUNK;
            const float *xi = x + i * cols + j0;
            /* the float differences first (a loop the compiler vectorizes), then their
             * squares summed in double in element order */
            if (u) {
                const float *ui = u + i * cols + j0;
                for (int64_t t = 0; t < m; t++)
                    d[t] = (sround(xi[t] / pre, ui[t], k->fmax, k->emin_bits, k->mshift) * post) * s_g - xi[t];
            } else {
                for (int64_t t = 0; t < m; t++)
                    d[t] = (rne(xi[t] / pre, k->fmax, k->emin_bits, k->offset) * post) * s_g - xi[t];
            }
            if (k->mae)
                for (int64_t t = 0; t < m; t++) e += fabs((double)d[t]);
            else
                for (int64_t t = 0; t < m; t++) e += (double)d[t] * (double)d[t];
        }
    return e;
}

/* The tile's two NVFP4 candidates: the block scales mapping its amax to 6 and to 4. */
static inline void four_over_six_scales(const Ctx *k, const float *x, int64_t cols, int64_t r0, int64_t r1,
                                        int64_t c0, int64_t c1, float *p6, float *s6, float *p4, float *s4) {
    uint32_t ab = tile_amax(x, cols, r0, r1, c0, c1);
    Ctx k4 = *k;
    k4.nv_max = 4.0f;
    block_scale(k, ab, p6, s6);
    block_scale(&k4, ab, p4, s4);
}

/* 4-over-6: the tile's NVFP4 scales mapping its amax to 6 and to 4; the one with the
 * smaller squared error (6 on a tie or a NaN). Returns block_scale's `in` (1). */
static int four_over_six(const Ctx *k, const float *x, const float *u, int64_t cols, int64_t r0,
                         int64_t r1, int64_t c0, int64_t c1, float *pre, float *post) {
    float p6, s6, p4, s4;
    four_over_six_scales(k, x, cols, r0, r1, c0, c1, &p6, &s6, &p4, &s4);
    /* equal scales (the 4-candidate's saturated at 448): the same candidate twice, 6 kept */
    int four = s4 != s6 && tile_err(k, x, u, cols, r0, r1, c0, c1, p4, s4) < tile_err(k, x, u, cols, r0, r1, c0, c1, p6, s6);
    *pre = four ? p4 : p6, *post = four ? s4 : s6;
    return 1;
}

typedef float f32x4 __attribute__((vector_size(16)));
typedef double f64x4 __attribute__((vector_size(32)));

/* The sum of squares of 16 float differences in double, in torch's order: element t
 * into running sum t % 4 (one 4-wide vector), then the four sums in turn. */
static inline double squares16(const float *d) {
    f64x4 acc = {0.0, 0.0, 0.0, 0.0};
    for (int g = 0; g < 16; g += 4) {
        f32x4 v;
        memcpy(&v, d + g, sizeof v);
        f64x4 w = __builtin_convertvector(v, f64x4);
        acc = g ? acc + w * w : w * w;
    }
    return ((acc[0] + acc[1]) + acc[2]) + acc[3];
}

/* The same order for the sum of absolute values (torch's `.double().abs().sum(dims)`). */
static inline double abs16(const float *d) {
    f64x4 acc = {0.0, 0.0, 0.0, 0.0};
    for (int g = 0; g < 16; g += 4) {
        f64x4 w = {fabs((double)d[g]), fabs((double)d[g + 1]), fabs((double)d[g + 2]), fabs((double)d[g + 3])};
        acc = g ? acc + w : w;
    }
    return ((acc[0] + acc[1]) + acc[2]) + acc[3];
}

/* 4-over-6 for a tile of at most 256 elements under its two candidates' scales, in one
 * pass: both candidates' cores (q * s_b) and float differences into buffers, their
 * squared errors summed in double, the kept core written out. Returns 1. */
#define SMALL_TILE 256
static inline __attribute__((always_inline)) int four_over_six_pick(
    const Ctx *k, const float *x, const float *u, float *core, int64_t cols,
    int64_t r0, int64_t r1, int64_t c0, const int64_t w, float p6, float s6, float p4, float s4) {
    const float s_g = k->s_g32;
    float c6[SMALL_TILE], c4[SMALL_TILE], d6[SMALL_TILE], d4[SMALL_TILE];
    int64_t n = 0;
    for (int64_t i = r0; i < r1; i++, n += w) {
        const float *xi = x + i * cols + c0;
        if (u) {
            const float *ui = u + i * cols + c0;
            for (int64_t t = 0; t < w; t++) {
                c6[n + t] = sround(xi[t] / p6, ui[t], k->fmax, k->emin_bits, k->mshift) * s6;
                c4[n + t] = sround(xi[t] / p4, ui[t], k->fmax, k->emin_bits, k->mshift) * s4;
            }
        } else {
            for (int64_t t = 0; t < w; t++) {
                c6[n + t] = rne(xi[t] / p6, k->fmax, k->emin_bits, k->offset) * s6;
                c4[n + t] = rne(xi[t] / p4, k->fmax, k->emin_bits, k->offset) * s4;
            }
        }
        for (int64_t t = 0; t < w; t++) {
            d6[n + t] = c6[n + t] * s_g - xi[t];
            d4[n + t] = c4[n + t] * s_g - xi[t];
        }
    }
    /* Summed in torch's order for `.double().square().sum(dims)` (torch 2.13, measured):
     * each row of 16 as squares16 does, then the rows in turn. Rows of another width
     * (written recipes only) stay in element order, torch's order for them not pinned. */
    double e6 = 0.0, e4 = 0.0;
    for (int64_t m = 0; m < n; m += w) {
        if (w == 16 && k->mae) {
            e6 += abs16(d6 + m);
            e4 += abs16(d4 + m);
        } else if (w == 16) {
            e6 += squares16(d6 + m);
            e4 += squares16(d4 + m);
        } else if (k->mae) {
            for (int64_t t = m; t < m + w; t++) {
                e6 += fabs((double)d6[t]);
                e4 += fabs((double)d4[t]);
            }
        } else {
            for (int64_t t = m; t < m + w; t++) {
                e6 += (double)d6[t] * (double)d6[t];
                e4 += (double)d4[t] * (double)d4[t];
            }
        }
    }
    const float *c = s4 != s6 && e4 < e6 ? c4 : c6;
    for (int64_t i = r0, m = 0; i < r1; i++, m += w) memcpy(core + i * cols + c0, c + m, w * sizeof(float));
    return 1;
}

static int four_over_six_small(const Ctx *k, const float *x, const float *u, float *core, int64_t cols,
                               int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    if ((r1 - r0) * (c1 - c0) > SMALL_TILE) return 0;
    float p6, s6, p4, s4;
    four_over_six_scales(k, x, cols, r0, r1, c0, c1, &p6, &s6, &p4, &s4);
    if (c1 - c0 == 16)  /* NVFP4's blocks and tiles: a loop of constant length */
        return four_over_six_pick(k, x, u, core, cols, r0, r1, c0, 16, p6, s6, p4, s4);
    return four_over_six_pick(k, x, u, core, cols, r0, r1, c0, c1 - c0, p6, s6, p4, s4);
}

/* 4-over-6 on row r in 1-D blocks of 16 (NVFP4's activations and gradients): the scales
 * of all its blocks first, then each block's candidates. The same arithmetic as
 * four_over_six_small block by block; split so that the scalar scale work of many blocks
 * overlaps instead of each block waiting on its own (4-over-6 is latency-bound per block).
 * Returns 0 (nothing done) for a row that is not whole blocks or is very long. */
#define ROW_BLOCKS 256
static int four_over_six_row16(const Ctx *k, const float *x, const float *u, float *core, int64_t cols,
                               int64_t r) {
    const int64_t nb = cols / 16;
    if (cols % 16 || nb > ROW_BLOCKS) return 0;
    float p6[ROW_BLOCKS], s6[ROW_BLOCKS], p4[ROW_BLOCKS], s4[ROW_BLOCKS];
    for (int64_t b = 0; b < nb; b++)
        four_over_six_scales(k, x, cols, r, r + 1, 16 * b, 16 * b + 16, p6 + b, s6 + b, p4 + b, s4 + b);
    for (int64_t b = 0; b < nb; b++)
        four_over_six_pick(k, x, u, core, cols, r, r + 1, 16 * b, 16, p6[b], s6[b], p4[b], s4[b]);
    return 1;
}

static Ctx setup(const float *x, int64_t rows, int64_t cols, int mode, float fmax, int emin,
                 int mbits, int emax_elem, float given, double *info, float *s_tensor) {
    Ctx k = {fmax, 1.0f, (float)((double)fmax / F32_MAX), mode, emax_elem,
             (uint32_t)(emin + 127) << 23, ((uint32_t)(23 - mbits) << 23) + HALF_MANTISSA,
             (uint32_t)mbits << 23, 6.0f, 1.0f, mode == NVFP4_4OVER6_MAE || mode == NVFP4_4OVER6_MAE_256};
    const double top = mode == NVFP4_4OVER6_256 || mode == NVFP4_4OVER6_MAE_256 ? 256.0 : 448.0;
    if (mode >= NVFP4_4OVER6_MAE) k.mode = NVFP4_4OVER6;
    float amax_all = mode == GIVEN || mode == TENSOR || mode >= NVFP4
                         ? amax_float(tile_amax(x, cols, 0, rows, 0, cols)) : NAN;
    info[0] = amax_all;
    *s_tensor = given;
    if (mode == TENSOR) {  /* scaling.tensor_scale */
        *s_tensor = (isfinite(amax_all) && amax_all > 0) ? fmax / amax_all : 1.0f;
        info[1] = *s_tensor;
    } else if (mode >= NVFP4) {  /* scaling.nvfp4_global_scale */
        double s_g = (isfinite(amax_all) && amax_all > 0) ? (double)amax_all / (top * 6.0) : 1.0;
        info[1] = s_g;
        k.s_g32 = (float)s_g;
    }
    return k;
}

/* Fake-quantize the row-major rows x cols float32 tensor x in tiles of br x bc (a tile
 * at the edge is cut short, as zero padding would leave it). `u` (or NULL for RNE) holds
 * one uniform draw per element for stochastic rounding. Writes the dequantized core
 * (see Mode) and, if bf16 is not NULL, its top 16 bits (the core is BF16-exact then).
 * info[0]: the tensor's amax (NaN if it holds one) in the per-tensor modes; info[1]:
 * the tensorwise scale (TENSOR) or the NVFP4 global scale (double, as Python's).
 * With `scales` (BLOCK_FP32 / BLOCK_POW2 only), the core is the grid values q and each
 * tile's s goes to scales[tile row][tile column]: q / s is then the dequantized value. */
void rcpf_quantize(const float *x, int64_t rows, int64_t cols, int64_t br, int64_t bc,
                   int mode, float fmax, int emin, int mbits, int emax_elem, float given,
                   const float *u, float *core, uint16_t *bf16, double *info, float *scales) {
    float s_tensor;
    Ctx k = setup(x, rows, cols, mode, fmax, emin, mbits, emax_elem, given, info, &s_tensor);
    mode = k.mode;  /* 4-over-6's conventions as NVFP4_4OVER6 */
    if (mode == GIVEN || mode == TENSOR) br = rows, bc = cols;
    const int64_t tiles_per_row = (cols + bc - 1) / bc;
    for (int64_t r0 = 0; r0 < rows; r0 += br) {
        int64_t r1 = r0 + br < rows ? r0 + br : rows;
        if (mode == NVFP4_ROWSCALED) {  /* quantize.nvfp4_row_encode_scale (br is 1) */
            float a = amax_float(tile_amax(x, cols, r0, r1, 0, cols));
            k.s_row = (isfinite(a) && a > 0.0f) ? (1.0f / a) * 2688.0f : 1.0f;  /* torch's `2688 / t` */
            scales[r0] = k.s_row;
        }
        if (mode == NVFP4_4OVER6 && br == 1 && bc == 16 && four_over_six_row16(&k, x, u, core, cols, r0))
            continue;
        for (int64_t c0 = 0; c0 < cols; c0 += bc) {
            int64_t c1 = c0 + bc < cols ? c0 + bc : cols;
            float pre = s_tensor, post = 1.0f;
            int in = 0, out = 0;
            if (mode == NVFP4_4OVER6 && four_over_six_small(&k, x, u, core, cols, r0, r1, c0, c1)) {
                continue;
            } else if (mode == NVFP4_4OVER6) {
                in = four_over_six(&k, x, u, cols, r0, r1, c0, c1, &pre, &post);
                out = 2;
            } else if (mode > TENSOR) {
                in = block_scale(&k, tile_amax(x, cols, r0, r1, c0, c1), &pre, &post);
                out = in ? 2 : 1;
                if (scales && mode != NVFP4_ROWSCALED) {  /* factored: core = q, the caller applies the scales */
                    scales[(r0 / br) * tiles_per_row + c0 / bc] = post;
                    out = 0;
                }
            }
#define TILE(i, o, s) tile(&k, x, u, core, cols, r0, r1, c0, c1, pre, post, i, o, s)
            if (u) {
                if (out == 0) TILE(0, 0, 1); else if (out == 1) TILE(0, 1, 1); else TILE(1, 2, 1);
            } else {
                if (out == 0) TILE(0, 0, 0); else if (out == 1) TILE(0, 1, 0); else TILE(1, 2, 0);
            }
#undef TILE
        }
    }
    if (bf16) to_bf16(core, bf16, rows * cols);
}

/* The same for the transpose: x is row-major rows x cols, and the tensor quantized is
 * x^T, in 1-D blocks of br along its last dimension, that is down x's columns (the
 * copy of an operand for a GEMM that contracts over its first dimension). Written
 * column-vectorized, with no transposed copy: core (rows x cols, row-major) holds the
 * result transposed back, and u[c * rows + r] is the draw of x[r, c] (x^T's order).
 * Block modes and NVFP4 only. `scales` as in rcpf_quantize, indexed [row block][column
 * of x] (no stochastic rounding with it). Returns 0, or -1 if out of memory. */
int rcpf_quantize_t(const float *x, int64_t rows, int64_t cols, int64_t br,
                    int mode, float fmax, int emin, int mbits, int emax_elem,
                    const float *u, float *core, uint16_t *bf16, double *info, float *scales) {
    float s_tensor;
    float *scratch = malloc(3 * cols * sizeof(float));
    if (!scratch) return -1;
    Ctx k = setup(x, rows, cols, mode, fmax, emin, mbits, emax_elem, 1.0f, info, &s_tensor);
    uint32_t *amax = (uint32_t *)scratch;
    float *pre = scratch + cols, *post = scratch + 2 * cols;
    const int in = mode >= MX_FLOOR;  /* block_scale's choice per mode */
    for (int64_t r0 = 0; r0 < rows; r0 += br) {
        int64_t r1 = r0 + br < rows ? r0 + br : rows;
        for (int64_t c = 0; c < cols; c++) amax[c] = 0;
        for (int64_t i = r0; i < r1; i++) {
            const uint32_t *xi = (const uint32_t *)(x + i * cols);
            for (int64_t c = 0; c < cols; c++) {
                uint32_t a = xi[c] & ~SIGN;
                amax[c] = a > amax[c] ? a : amax[c];
            }
        }
        for (int64_t c = 0; c < cols; c++) block_scale(&k, amax[c], pre + c, post + c);
        if (scales) memcpy(scales + (r0 / br) * cols, post, cols * sizeof(float));
        for (int64_t i = r0; i < r1; i++) {
            const float *xi = x + i * cols;
            float *ci = core + i * cols;
            if (scales) {  /* factored (BLOCK_FP32 / BLOCK_POW2): core = q */
                for (int64_t c = 0; c < cols; c++) ci[c] = quant1(&k, xi[c], pre[c], post[c], NULL, 0, 0);
            } else if (u) {
                for (int64_t c = 0; c < cols; c++)
                    ci[c] = in ? quant1(&k, xi[c], pre[c], post[c], u + c * rows + i, 1, 2)
                               : quant1(&k, xi[c], pre[c], post[c], u + c * rows + i, 0, 1);
            } else if (in) {
                for (int64_t c = 0; c < cols; c++) ci[c] = quant1(&k, xi[c], pre[c], post[c], NULL, 1, 2);
            } else {
                for (int64_t c = 0; c < cols; c++) ci[c] = quant1(&k, xi[c], pre[c], post[c], NULL, 0, 1);
            }
        }
    }
    free(scratch);
    if (bf16) to_bf16(core, bf16, rows * cols);
    return 0;
}

/* The epilogue of an emulated low-precision GEMM (linear._mm): the BF16 output widened
 * to float32, times the per-tensor factor (if apply_factor), divided by the per-row
 * factors of the left operand (row_div[i]) and of the right one (col_div[j]), plus the
 * bias (bias[j]), each step rounded in float32 as torch's separate ops round it. */
void rcpf_epilogue(const uint16_t *in, float *out, int64_t rows, int64_t cols, float factor,
                   int apply_factor, const float *row_div, const float *col_div, const float *bias) {
    for (int64_t i = 0; i < rows; i++) {
        const uint16_t *ii = in + i * cols;
        float *oi = out + i * cols;
        const float r = row_div ? row_div[i] : 1.0f;
        for (int64_t j = 0; j < cols; j++) {
            float v = float_of((uint32_t)ii[j] << 16);
            if (apply_factor) v = v * factor;
            if (row_div) v = v / r;
            if (col_div) v = v / col_div[j];
            if (bias) v = v + bias[j];
            oi[j] = v;
        }
    }
}

/* Stochastic rounding's uniform draws as torch.rand makes them on a CPU generator, so
 * the SR recipes keep their numbers while drawing them several times faster (torch draws
 * one element at a time through its generic kernel: 3-7 ns a number here).
 *
 * torch.rand(n, generator=g) in float32 takes one 32-bit output of g's mt19937 per
 * element, in memory order, and keeps its low 24 bits times 2^-24. `state` is the bytes
 * of Generator.get_state(): `left` (int32) at byte 8, `next` (uint64) at 16 and the 624
 * words, each as a uint64, from 24. The engine twists when --left reaches 0, then serves
 * words[next++]. This advances the copy exactly as torch.rand would advance g;
 * kernels.py checks the numbers and the state against torch.rand before trusting it. */
#define MT_N 624
#define MT_M 397

static inline uint32_t mt_twist(uint32_t u, uint32_t v) {
    return (((u & 0x80000000u) | (v & 0x7fffffffu)) >> 1) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
}

static void mt_next_state(uint32_t *s) {
    int i = 0;
    for (; i < MT_N - MT_M; i++) s[i] = s[i + MT_M] ^ mt_twist(s[i], s[i + 1]);
    for (; i < MT_N - 1; i++) s[i] = s[i + MT_M - MT_N] ^ mt_twist(s[i], s[i + 1]);
    s[MT_N - 1] = s[MT_M - 1] ^ mt_twist(s[MT_N - 1], s[0]);
}

static inline void mt_emit(const uint32_t *s, int64_t m, float *out) {
    for (int64_t i = 0; i < m; i++) {
        uint32_t y = s[i];
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c5680u;
        y ^= (y << 15) & 0xefc60000u;
        y ^= y >> 18;
        out[i] = (float)(y & 0xFFFFFFu) * 0x1p-24f;
    }
}

void rcpf_uniform(uint8_t *state, int64_t n, float *out) {
    int32_t left;
    uint64_t next, words[MT_N];
    uint32_t s[MT_N];
    memcpy(&left, state + 8, 4);
    memcpy(&next, state + 16, 8);
    memcpy(words, state + 24, sizeof words);
    for (int i = 0; i < MT_N; i++) s[i] = (uint32_t)words[i];
    int64_t k = 0;
    while (k < n) {
        int64_t avail = (int64_t)left - 1;  /* words served before the next twist */
        if (avail <= 0) {
            mt_next_state(s);
            left = MT_N + 1;  /* torch sets 624 after the decrement that twisted */
            next = 0;
            continue;
        }
        int64_t m = n - k < avail ? n - k : avail;
        mt_emit(s + next, m, out + k);
        k += m;
        next += (uint64_t)m;
        left -= (int32_t)m;
    }
    for (int i = 0; i < MT_N; i++) words[i] = s[i];
    memcpy(state + 8, &left, 4);
    memcpy(state + 16, &next, 8);
    memcpy(state + 24, words, sizeof words);
}
