/*
 * kern.h: the CPU kernels behind ops.h, per kernel set, as the dispatcher (kernels.c) and the
 * tests see them. Internal to src/cpu and the tests.
 */
#ifndef PV_KERN_H
#define PV_KERN_H

#include "cpu/ops.h"
#include "quant/quant.h"

/* ---- exact numerics (matmul.c, qmatmul.c), with the kernel set given: avx2 = 1 takes the
 * AVX2/FMA kernels when the CPU has them, 0 the portable ones ---------------------------------- */
void pv_matmul_rows_set(struct pv_pool* p, int avx2, float* y, int ldy, const float* x, int ldx, int T,
                        const struct pv_tensor* W, int64_t o0, int64_t o1);
void pv_quant_matmul_rows_set(struct pv_pool* p, int avx2, float* y, int ldy, const float* x, int ldx, int T,
                              const struct pv_tensor* W, int64_t o0, int64_t o1);
float pv_dot_f32_set(int avx2, const float* a, const float* b, int n);
void pv_axpy_f32_set(int avx2, float* y, float a, const float* x, int n);

/* ---- fast numerics (qdot.h) ---------------------------------------------------------------- */

/* Portable (qdot.c): one output, and rows [o0, o1) x T activation rows (act_stride bytes apart)
 * of a matrix as stored. */
float pv_qdot_ref(enum pv_dtype t, const void* w, const void* act, int64_t n);
void pv_qgemm_generic(enum pv_dtype t, float* y, int ldy, const void* act, size_t act_stride, int T, const void* w, int64_t n,
                      int64_t o0, int64_t o1);

/* AVX-512 VNNI (qgemm_avx512.c): rows [o0, o1) of a panel-packed matrix (panels: its first
 * panel) x T converted activation rows; writes y[t*ldy + o] for those rows only. */
void pv_qgemm_avx512(enum pv_dtype t, float* y, int ldy, const void* act, size_t act_stride, int T, const unsigned char* panels,
                     int64_t n, int64_t o0, int64_t o1);
/* AVX2 (qgemm_avx2.c): the same over the same panels, 8 rows at a time (vpmaddubsw). */
void pv_qgemm_avx2(enum pv_dtype t, float* y, int ldy, const void* act, size_t act_stride, int T,
                   const unsigned char* panels, int64_t n, int64_t o0, int64_t o1);
/* AVX512-BF16: BF16 rows [o0, o1) of w (row stride ldw elements) x T bf16 activation rows
 * (act_stride bytes apart). Order per output: 16 lanes, lane j adds the products of elements
 * 32c+2j and 32c+2j+1 (vdpbf16ps) for c = 0, 1, ... (the last chunk zero-padded), then
 * ((l0+l8)+(l4+l12)) ... the 8-lane tree of matmul.c over lanes l_i + l_{i+8}. */
void pv_bf16gemm_avx512(float* y, int ldy, const void* act, size_t act_stride, int T, const uint16_t* w, size_t ldw, int64_t n,
                        int64_t o0, int64_t o1);
/* AVX-512 activation conversion: the same bytes as pv_act_convert. */
void pv_act_convert_avx512(int fmt, const float* x, int ldx, int T, int64_t n, void* dst, size_t row_bytes);

/* AVX-512 attention and element-wise ops (attn_avx512.c; the order is described there). */
size_t pv_attn_avx512_scratch(int nt, int G, int hd, int dt);
int pv_attn_avx512_ok(int hd); /* head sizes it handles: multiples of 16 up to 256 */
void pv_attn_avx512(const float* q, int ldq, float* o, int ldo, const unsigned char* kc, const unsigned char* vc, int dt,
                    size_t rb, int hd, int G, int kvh, int t0, int nt, int pos0, float scale, float* ws);
void pv_swiglu_avx512(float* g, const float* u, size_t n);
void pv_exp_avx512(float* x, size_t n);
int pv_argmax_avx512(const float* x, int n); /* pv_argmax's answer, vectorised */
void pv_axpy_f32_avx512(float* y, float a, const float* x, int n); /* = the avx2 axpy, per element */
float pv_dot_f32_avx512(const float* a, const float* b, int n);    /* 16 lanes, then hsum16 */

/* AVX-512 Gated DeltaNet steps (deltanet_avx512.c): whether they handle the shapes (dv a
 * multiple of 16 up to 256, conv_dim a multiple of 16, kernel up to 8); one recurrent step of
 * one value head (the avx2 set's per-element operations); the causal conv + SiLU over n rows;
 * o *= silu(z). */
int pv_delta_avx512_ok(int dv, int cd, int K);
void pv_delta_step_avx512(float* S, int dk, int dv, const float* q, const float* k, const float* v, float decay,
                          float beta, float* o);
void pv_conv_silu_avx512(const float* state, const float* conv_w, const float* mixed, float* out, int n, int cd, int K);
void pv_silu_gate_avx512(float* o, const float* z, size_t n);

/* Which sets this build compiled (1) on this architecture; the CPU check is pv_isa_best(). */
int pv_have_avx512_kernels(void);

#endif
