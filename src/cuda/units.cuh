/*
 * units.cuh: how the GEMV kernels read and dequantize their units of weights (gemv.cu explains
 * the summation order), the per-element dequantization of the embedding lookup, and the plane
 * split of the upload: one copy of each, usable on the host too (__host__ __device__), so
 * tests/cuda/test_cuda_host.cu checks them against quant.h's pv_dequant_block on any machine.
 *
 * On the device the arithmetic goes through the IEEE intrinsics (__fmul_rn, __fsub_rn: never
 * fused); on the host through plain operations, which the host build compiles with
 * -ffp-contract=off, so both perform the same roundings.
 */
#ifndef PV_CUDA_UNITS_CUH
#define PV_CUDA_UNITS_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "quant/quant.h"
#include "quant/tensor.h"
}

#define PV_HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define PV_UNROLL _Pragma("unroll")
#else
#define PV_UNROLL
#endif

#ifdef __CUDA_ARCH__
#define PV_FMUL(a, b) __fmul_rn(a, b)
#define PV_FSUB(a, b) __fsub_rn(a, b)
#define PV_FADD(a, b) __fadd_rn(a, b)
#define PV_U2F(u) __uint_as_float(u)
#define PV_PERM(x, y, s) __byte_perm(x, y, s)
#else
static inline float PV_FMUL(float a, float b) { return a * b; }
static inline float PV_FSUB(float a, float b) { return a - b; }
static inline float PV_FADD(float a, float b) { return a + b; }
static inline float PV_U2F(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}
/* __byte_perm: byte i of the result is byte (s >> 4i) & 7 of the 8 bytes y:x */
static inline uint32_t PV_PERM(uint32_t x, uint32_t y, uint32_t s)
{
	uint64_t v = (uint64_t)y << 32 | x;
	uint32_t r = 0;
	for (int i = 0; i < 4; i++) r |= (uint32_t)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
	return r;
}
#endif

namespace pv_units {

enum Kind { K_BF16 = 0, K_F16, K_F32, K_SCALAR, K_Q8_0, K_Q4_0, K_Q4_K, K_Q6_K, K_Q4_1, K_Q5_0, K_Q5_1, K_Q5_K, K_COUNT };

struct Seg {
	const unsigned char *p0, *p1, *p2;
	size_t s0, s1, s2;
	float* y;
	const float* bias;
	int ldy;
	int rows;
	int block0; /* first block of this output */
};

/* The segment of one output: matrix w's planes (struct dmat: p[], stride[]), the output o
 * (struct gemv_out: y, ldy, bias), its rows (of one expert when gathered) and first block */
template <class M, class O>
inline Seg seg_of(const M* w, const O& o, int rows, int block0)
{
	Seg s;
	s.p0 = w->p[0];
	s.p1 = w->p[1];
	s.p2 = w->p[2];
	s.s0 = w->stride[0];
	s.s1 = w->stride[1];
	s.s2 = w->stride[2];
	s.y = o.y;
	s.ldy = o.ldy;
	s.bias = o.bias;
	s.rows = rows;
	s.block0 = block0;
	return s;
}

/* Weight loads: read once per call, so they bypass L1. */
PV_HD uint4 ldw4(const unsigned char* p)
{
	uint4 r;
#ifdef __CUDA_ARCH__
	asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
	    : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
	    : "l"(p));
#else
	memcpy(&r, p, 16);
#endif
	return r;
}

PV_HD unsigned short ldw2(const unsigned char* p)
{
#ifdef __CUDA_ARCH__
	return __ldg(reinterpret_cast<const unsigned short*>(p));
#else
	unsigned short v;
	memcpy(&v, p, 2);
	return v;
#endif
}

template <typename T>
PV_HD T ldg(const unsigned char* p)
{
#ifdef __CUDA_ARCH__
	return __ldg(reinterpret_cast<const T*>(p));
#else
	T v;
	memcpy(&v, p, sizeof v);
	return v;
#endif
}

PV_HD float f16f(unsigned int h)
{
#ifdef __CUDA_ARCH__
	return __half2float(__ushort_as_half((unsigned short)h));
#else
	return pv_f16_to_f32((uint16_t)h);
#endif
}

PV_HD uint32_t word(const uint4& v, int i)
{
	return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/* 2^23 + b as a float, b a byte (exact): subtracting 2^23 + c then gives b - c exactly. */
PV_HD float magic_byte(uint32_t w, int k)
{
	return PV_U2F(PV_PERM(w, 0x4B000000u, 0x7540u | (unsigned)k));
}

/* acc[t] = fmaf(w, xs[t*tc + e], acc[t]) for every staged row */
template <int TT>
PV_HD void fma_rows(float w, const float* xs, int tc, int e, float* acc)
{
PV_UNROLL
	for (int t = 0; t < TT; t++) acc[t] = fmaf(w, xs[t * tc + e], acc[t]);
}

/* the same for 4 consecutive elements e..e+3 (e a multiple of 4), in order */
template <int TT>
PV_HD void fma4_rows(const float* w, const float* xs, int tc, int e, float* acc)
{
PV_UNROLL
	for (int t = 0; t < TT; t++) {
		const float4 a = *reinterpret_cast<const float4*>(xs + t * tc + e);
		float s = acc[t];
		s = fmaf(w[0], a.x, s);
		s = fmaf(w[1], a.y, s);
		s = fmaf(w[2], a.z, s);
		s = fmaf(w[3], a.w, s);
		acc[t] = s;
	}
}

/* The quantized units' factored sums (v4): q holds a unit's quantized values as exact floats,
 * n4 groups of 4 (a quad or an octet), all under one scale d and offset m (w = d q + m, the
 * block's dequantization). Per activation row: s = the q x products summed in element order
 * (a multiply, then fmaf), acc = fmaf(s, d, acc), then, with an offset, the activations' sum
 * t in element order and acc = fmaf(m, t, acc). The scale multiplies once per unit instead of
 * once per element; the sum differs from the per-weight form by rounding only (README.md,
 * Exactness). */
template <int TT, int N4, bool OFF>
PV_HD void qdot_rows(const float* q, float d, float m, const float* xs, int tc, int e, float* acc)
{
PV_UNROLL
	for (int t = 0; t < TT; t++) {
		float s = 0.0f, sx = 0.0f;
PV_UNROLL
		for (int g = 0; g < N4; g++) {
			const float4 a = *reinterpret_cast<const float4*>(xs + t * tc + e + 4 * g);
			s = g ? fmaf(q[4 * g], a.x, s) : PV_FMUL(q[0], a.x);
			s = fmaf(q[4 * g + 1], a.y, s);
			s = fmaf(q[4 * g + 2], a.z, s);
			s = fmaf(q[4 * g + 3], a.w, s);
			if (OFF) sx = g ? PV_FADD(PV_FADD(PV_FADD(PV_FADD(sx, a.x), a.y), a.z), a.w)
			                : PV_FADD(PV_FADD(PV_FADD(a.x, a.y), a.z), a.w);
		}
		float r = fmaf(s, d, acc[t]);
		if (OFF) r = fmaf(m, sx, r);
		acc[t] = r;
	}
}

/* How a unit's dequantized values meet the activations (Kern<K>::FORM): FORM_FLOAT, w are the
 * weights (fma4_rows, fma_rows); FORM_Q, w are the quantized values under the scale d (qdot_rows
 * without offset); FORM_QOFF, the same plus the offset m times the activations' sum. */
enum { FORM_FLOAT = 0, FORM_Q = 1, FORM_QOFF = 2 };

/* One unit of UE dequantized values against TT staged rows at element e0 of each: the forms
 * above, in the summation order gemv.cu describes. */
template <int FORM, int UE, int TT>
PV_HD void dot_unit(const float* w, float d, float m, const float* xs, int tc, int e0, float* acc)
{
	if constexpr (FORM == FORM_FLOAT && UE == 1) {
		fma_rows<TT>(w[0], xs, tc, e0, acc);
	} else if constexpr (FORM == FORM_FLOAT) {
PV_UNROLL
		for (int g = 0; g < UE / 4; g++) fma4_rows<TT>(w + 4 * g, xs, tc, e0 + 4 * g, acc);
	} else {
		qdot_rows<TT, UE / 4, FORM == FORM_QOFF>(w, d, m, xs, tc, e0, acc);
	}
}

/* Every kind's dot (walk, walk_direct, gemv_tma.cu): its deq, then dot_unit. D is the kind's
 * Kern (its UE, FORM and deq); Raw is deduced, so this base needs no complete D. */
template <class D>
struct UnitDot {
	template <int TT, class Raw>
	PV_HD static void dot(const Raw& r, const float* xs, int tc, int e0, float* acc)
	{
		float w[D::UE], d = 0.0f, m = 0.0f;
		D::deq(r, w, d, m);
		dot_unit<D::FORM, D::UE, TT>(w, d, m, xs, tc, e0, acc);
	}
};

template <int K>
struct Kern;

template <>
struct Kern<K_BF16> : UnitDot<Kern<K_BF16>> {
	static constexpr int UE = 8, U = 4;
	struct Raw {
		uint4 v;
	};
	PV_HD static Raw load(const Seg& s, int64_t row, int u)
	{
		return Raw{ ldw4(s.p0 + (size_t)row * s.s0 + (size_t)u * 16) };
	}
	static constexpr int FORM = FORM_FLOAT;
	PV_HD static void deq(const Raw& r, float* w, float&, float&)
	{
PV_UNROLL
		for (int i = 0; i < 4; i++) {
			uint32_t v = word(r.v, i);
			w[2 * i] = PV_U2F(v << 16);
			w[2 * i + 1] = PV_U2F(v & 0xffff0000u);
		}
	}
};

template <>
struct Kern<K_F16> : UnitDot<Kern<K_F16>> {
	static constexpr int UE = 8, U = 4;
	struct Raw {
		uint4 v;
	};
	PV_HD static Raw load(const Seg& s, int64_t row, int u)
	{
		return Raw{ ldw4(s.p0 + (size_t)row * s.s0 + (size_t)u * 16) };
	}
	static constexpr int FORM = FORM_FLOAT;
	PV_HD static void deq(const Raw& r, float* w, float&, float&)
	{
PV_UNROLL
		for (int i = 0; i < 4; i++) {
			uint32_t v = word(r.v, i);
			w[2 * i] = f16f(v & 0xffffu);
			w[2 * i + 1] = f16f(v >> 16);
		}
	}
};

template <>
struct Kern<K_F32> : UnitDot<Kern<K_F32>> {
	static constexpr int UE = 4, U = 4;
	struct Raw {
		uint4 v;
	};
	PV_HD static Raw load(const Seg& s, int64_t row, int u)
	{
		return Raw{ ldw4(s.p0 + (size_t)row * s.s0 + (size_t)u * 16) };
	}
	static constexpr int FORM = FORM_FLOAT;
	PV_HD static void deq(const Raw& r, float* w, float&, float&)
	{
		w[0] = PV_U2F(r.v.x);
		w[1] = PV_U2F(r.v.y);
		w[2] = PV_U2F(r.v.z);
		w[3] = PV_U2F(r.v.w);
	}
};

/* Float rows that are not whole 16-byte vectors (odd widths): one element per unit. The kind's
 * float type is a run-time parameter (this path is for small odd models only). */
template <>
struct Kern<K_SCALAR> : UnitDot<Kern<K_SCALAR>> {
	static constexpr int UE = 1, U = 4;
	struct Raw {
		float w;
	};
	PV_HD static Raw load_t(const Seg& s, int64_t row, int u, int stype)
	{
		const unsigned char* p = s.p0 + (size_t)row * s.s0;
		if (stype == PV_F32) return Raw{ ldg<float>(p + (size_t)u * 4) };
		unsigned int h = ldw2(p + (size_t)u * 2);
		return Raw{ stype == PV_F16 ? f16f(h) : PV_U2F(h << 16) };
	}
	static constexpr int FORM = FORM_FLOAT;
	PV_HD static void deq(const Raw& r, float* w, float&, float&) { w[0] = r.w; }
};

/*
 * The quantized kinds (v4): a unit is 4 consecutive elements (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1)
 * or 8 (Q4_K, Q5_K, Q6_K: an octet under one sub-block scale), so the 32 lanes of a warp, owning units
 * u = lane (mod 32), read 32 consecutive units of the activation row: one float4 (or two) per
 * lane, 512 contiguous bytes per warp load (4 cache lines; a unit of a whole block made every
 * lane read its own line, 32 lines per load, and that L1 wavefront rate bounded the quantized
 * GEMVs). The weight bytes of a unit are one 4- or 8-byte load (a warp's loads cover contiguous
 * bytes of the row); the per-block scales are small cached loads shared by the lanes of a
 * block. The quantized values q and the scales are pv_dequant_block's floats; the unit's sum
 * factors the scale out (qdot_rows: sum q x in element order, then one fmaf by the scale, and
 * the offset times sum x), so a one-hot activation still gives each weight exactly.
 */

/* A weight row's plane pointers (the quantized walks compute them once per row, so a unit's
 * loads are its row pointer plus a small offset) */
struct RowP {
	const unsigned char *q0, *q1, *q2;
};
PV_HD RowP rowp(const Seg& s, int64_t row)
{
	return RowP{ s.p0 + (size_t)row * s.s0, s.p1 ? s.p1 + (size_t)row * s.s1 : s.p1, s.p2 ? s.p2 + (size_t)row * s.s2 : s.p2 };
}

/* 4 and 8 weight bytes (read once per call: bypass L1) */
PV_HD uint32_t ldw1(const unsigned char* p)
{
#ifdef __CUDA_ARCH__
	uint32_t r;
	asm("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
	return r;
#else
	uint32_t r;
	memcpy(&r, p, 4);
	return r;
#endif
}

PV_HD uint2 ldw8(const unsigned char* p)
{
	uint2 r;
#ifdef __CUDA_ARCH__
	asm("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
#else
	memcpy(&r, p, 8);
#endif
	return r;
}

/* The fifth bits of four consecutive elements: bits 0..3 of b (b < 16) moved to bit 4 of bytes
 * 0..3 (b * 0x00204081 places bit k at bit 8k; the four shifted copies of b do not overlap, so
 * nothing carries). */
PV_HD uint32_t spread4(uint32_t b) { return ((b * 0x00204081u) & 0x01010101u) << 4; }

/* The 32-element types' quad: unit u is elements 4u .. 4u+3, in block u / 8 at j0 = 4 (u % 8):
 * the low nibbles of qs bytes j0 .. j0+3 (j0 < 16) or the high nibbles of bytes j0-16 ..
 * (j0 >= 16), i.e. word u % 4 of the block's qs shifted right by 4 (u / 4 % 2); Q5_x's fifth
 * bits are bits j0 .. j0+3 of qh. Returns the four 4-bit values, one per byte. */
PV_HD uint32_t quad_nibbles(uint32_t w, int u) { return (w >> (4 * ((u >> 2) & 1))) & 0x0f0f0f0fu; }
PV_HD const unsigned char* quad_qs(const RowP& p, int u) { return p.q0 + (size_t)(u >> 3) * 16 + 4 * (u & 3); }

/* Q8_0: x = d * q (pv_dequant_block: (float)(int8_t)q * d). Unit: qs word u, d of block u / 8. */
template <>
struct Kern<K_Q8_0> : UnitDot<Kern<K_Q8_0>> {
	static constexpr int UE = 4, U = 8;
	struct Raw {
		uint32_t q;
		unsigned int d;
	};
	/* the unit's byte pointers; unit u + 32k is at a + 128k, b + 8k */
	struct Ptr {
		const unsigned char *a, *b;
		int u;
	};
	PV_HD static Ptr at(const RowP& p, int u) { return Ptr{ p.q0 + (size_t)u * 4, p.q1 + (size_t)(u >> 3) * 2, u }; }
	PV_HD static Raw loadq(const Ptr& q, int k) { return Raw{ ldw1(q.a + 128 * k), ldw2(q.b + 8 * k) }; }
	PV_HD static Raw loadp(const RowP& p, int u) { return loadq(at(p, u), 0); }
	PV_HD static Raw load(const Seg& s, int64_t row, int u) { return loadp(rowp(s, row), u); }
	static constexpr int FORM = FORM_Q;
	PV_HD static void deq(const Raw& r, float* w, float& d, float& m)
	{
		m = 0.0f;
		d = f16f(r.d);
		const uint32_t v = r.q ^ 0x80808080u; /* int8 + 128 */
PV_UNROLL
		for (int k = 0; k < 4; k++) w[k] = PV_FSUB(magic_byte(v, k), 8388736.0f);
	}
};

/* Q4_0: x = (q - 8) * d. */
template <>
struct Kern<K_Q4_0> : UnitDot<Kern<K_Q4_0>> {
	static constexpr int UE = 4, U = 8;
	struct Raw {
		uint32_t q;
		unsigned int d;
		int u;
	};
	/* unit u + 32k: a + 64k, b + 8k (and the same u % 32) */
	struct Ptr {
		const unsigned char *a, *b;
		int u;
	};
	PV_HD static Ptr at(const RowP& p, int u) { return Ptr{ quad_qs(p, u), p.q1 + (size_t)(u >> 3) * 2, u }; }
	PV_HD static Raw loadq(const Ptr& q, int k) { return Raw{ ldw1(q.a + 64 * k), ldw2(q.b + 8 * k), q.u }; }
	PV_HD static Raw loadp(const RowP& p, int u) { return loadq(at(p, u), 0); }
	PV_HD static Raw load(const Seg& s, int64_t row, int u) { return loadp(rowp(s, row), u); }
	static constexpr int FORM = FORM_Q;
	PV_HD static void deq(const Raw& r, float* w, float& d, float& m)
	{
		m = 0.0f;
		d = f16f(r.d);
		const uint32_t v = quad_nibbles(r.q, r.u);
PV_UNROLL
		for (int k = 0; k < 4; k++) w[k] = PV_FSUB(magic_byte(v, k), 8388616.0f);
	}
};

/* Q4_1: x = q * d + m, a multiply then an add (pv_dequant_block). Planes: qs | d,m (one 4-byte
 * word per block). */
template <>
struct Kern<K_Q4_1> : UnitDot<Kern<K_Q4_1>> {
	static constexpr int UE = 4, U = 8;
	struct Raw {
		uint32_t q;
		unsigned int dm;
		int u;
	};
	/* unit u + 32k: a + 64k, b + 16k */
	struct Ptr {
		const unsigned char *a, *b;
		int u;
	};
	PV_HD static Ptr at(const RowP& p, int u) { return Ptr{ quad_qs(p, u), p.q1 + (size_t)(u >> 3) * 4, u }; }
	PV_HD static Raw loadq(const Ptr& q, int k) { return Raw{ ldw1(q.a + 64 * k), ldg<unsigned int>(q.b + 16 * k), q.u }; }
	PV_HD static Raw loadp(const RowP& p, int u) { return loadq(at(p, u), 0); }
	PV_HD static Raw load(const Seg& s, int64_t row, int u) { return loadp(rowp(s, row), u); }
	static constexpr int FORM = FORM_QOFF;
	PV_HD static void deq(const Raw& r, float* w, float& d, float& m)
	{
		d = f16f(r.dm & 0xffffu);
		m = f16f(r.dm >> 16);
		const uint32_t v = quad_nibbles(r.q, r.u);
PV_UNROLL
		for (int k = 0; k < 4; k++) w[k] = PV_FSUB(magic_byte(v, k), 8388608.0f);
	}
};

/* Q5_0: Q4_0's nibbles plus bit j of the 32-bit qh as the fifth bit of element j;
 * x = (q - 16) * d. Planes: qs | qh | d. */
template <>
struct Kern<K_Q5_0> : UnitDot<Kern<K_Q5_0>> {
	static constexpr int UE = 4, U = 8;
	struct Raw {
		uint32_t q, qh;
		unsigned int d;
		int u;
	};
	/* unit u + 32k: a + 64k, b + 16k, c + 8k */
	struct Ptr {
		const unsigned char *a, *b, *c;
		int u;
	};
	PV_HD static Ptr at(const RowP& p, int u)
	{
		return Ptr{ quad_qs(p, u), p.q1 + (size_t)(u >> 3) * 4, p.q2 + (size_t)(u >> 3) * 2, u };
	}
	PV_HD static Raw loadq(const Ptr& q, int k)
	{
		return Raw{ ldw1(q.a + 64 * k), ldg<unsigned int>(q.b + 16 * k), ldw2(q.c + 8 * k), q.u };
	}
	PV_HD static Raw loadp(const RowP& p, int u) { return loadq(at(p, u), 0); }
	PV_HD static Raw load(const Seg& s, int64_t row, int u) { return loadp(rowp(s, row), u); }
	static constexpr int FORM = FORM_Q;
	PV_HD static void deq(const Raw& r, float* w, float& d, float& m)
	{
		m = 0.0f;
		d = f16f(r.d);
		const uint32_t v = quad_nibbles(r.q, r.u) | spread4((r.qh >> (4 * (r.u & 7))) & 0xfu);
PV_UNROLL
		for (int k = 0; k < 4; k++) w[k] = PV_FSUB(magic_byte(v, k), 8388624.0f);
	}
};

/* Q5_1: Q5_0's 5-bit q, x = q * d + m (multiply, then add). Planes: qs | qh | d,m. */
template <>
struct Kern<K_Q5_1> : UnitDot<Kern<K_Q5_1>> {
	static constexpr int UE = 4, U = 8;
	struct Raw {
		uint32_t q, qh;
		unsigned int dm;
		int u;
	};
	/* unit u + 32k: a + 64k, b + 16k, c + 16k */
	struct Ptr {
		const unsigned char *a, *b, *c;
		int u;
	};
	PV_HD static Ptr at(const RowP& p, int u)
	{
		return Ptr{ quad_qs(p, u), p.q1 + (size_t)(u >> 3) * 4, p.q2 + (size_t)(u >> 3) * 4, u };
	}
	PV_HD static Raw loadq(const Ptr& q, int k)
	{
		return Raw{ ldw1(q.a + 64 * k), ldg<unsigned int>(q.b + 16 * k), ldg<unsigned int>(q.c + 16 * k), q.u };
	}
	PV_HD static Raw loadp(const RowP& p, int u) { return loadq(at(p, u), 0); }
	PV_HD static Raw load(const Seg& s, int64_t row, int u) { return loadp(rowp(s, row), u); }
	static constexpr int FORM = FORM_QOFF;
	PV_HD static void deq(const Raw& r, float* w, float& d, float& m)
	{
		d = f16f(r.dm & 0xffffu);
		m = f16f(r.dm >> 16);
		const uint32_t v = quad_nibbles(r.q, r.u) | spread4((r.qh >> (4 * (r.u & 7))) & 0xfu);
PV_UNROLL
		for (int k = 0; k < 4; k++) w[k] = PV_FSUB(magic_byte(v, k), 8388608.0f);
	}
};

/* byte k (0..11, run-time) of the 12 scale bytes held in words y, z, w of a Q4_K header */
PV_HD int sbyte(const uint4& h, int k)
{
	uint32_t v = k < 4 ? h.y : k < 8 ? h.z : h.w;
	return (int)((v >> (8 * (k & 3))) & 0xffu);
}

/* (d * sc, dmin * m) of sub-block j of a Q4_K/Q5_K header (pv_q_scale_min_k4, then the two
 * multiplies of pv_dequant_block) */
PV_HD void k4_scales(const uint4& h, int j, float* d1, float* m1)
{
	const float d = f16f(h.x & 0xffffu), dmin = f16f(h.x >> 16);
	int sc, m;
	if (j < 4) {
		sc = sbyte(h, j) & 63;
		m = sbyte(h, j + 4) & 63;
	} else {
		sc = (sbyte(h, j + 4) & 0xf) | ((sbyte(h, j - 4) >> 6) << 4);
		m = (sbyte(h, j + 4) >> 4) | ((sbyte(h, j) >> 6) << 4);
	}
	*d1 = PV_FMUL(d, (float)sc);
	*m1 = PV_FMUL(dmin, (float)m);
}

/* Q4_K: unit u is the octet l0 = 8 (u % 4) .. l0+7 of sub-block j = u / 4 % 8 of super-block
 * u / 32: the low (j even) or high (j odd) nibbles of qs[32 (j/2) + l0 ..], one 8-byte load;
 * x = (d * sc) * q - dmin * m, a multiply then a subtract (pv_dequant_block). The 16-byte
 * header is a cached load shared by the warp (its 32 units are one super-block). */
template <>
struct Kern<K_Q4_K> : UnitDot<Kern<K_Q4_K>> {
	static constexpr int UE = 8, U = 4;
	struct Raw {
		uint4 h;
		uint2 q;
		int j;
	};
	/* unit u + 32k is the same octet of the k-th next super-block: a + 144k, b + 144k */
	struct Ptr {
		const unsigned char *a, *b;
		int j;
	};
	PV_HD static Ptr at(const RowP& p, int u)
	{
		const unsigned char* b = p.q0 + (size_t)(u >> 5) * 144;
		const int j = (u >> 2) & 7;
		return Ptr{ b, b + 16 + 32 * (j >> 1) + 8 * (u & 3), j };
	}
	PV_HD static Raw loadq(const Ptr& q, int k) { return Raw{ ldg<uint4>(q.a + 144 * k), ldw8(q.b + 144 * k), q.j }; }
	PV_HD static Raw loadp(const RowP& p, int u) { return loadq(at(p, u), 0); }
	PV_HD static Raw load(const Seg& s, int64_t row, int u) { return loadp(rowp(s, row), u); }
	static constexpr int FORM = FORM_QOFF;
	PV_HD static void deq(const Raw& r, float* w, float& d, float& m)
	{
		float m1;
		k4_scales(r.h, r.j, &d, &m1);
		m = -m1;
PV_UNROLL
		for (int i = 0; i < 2; i++) {
			const uint32_t v = ((i ? r.q.y : r.q.x) >> (4 * (r.j & 1))) & 0x0f0f0f0fu;
PV_UNROLL
			for (int k = 0; k < 4; k++) w[4 * i + k] = PV_FSUB(magic_byte(v, k), 8388608.0f);
		}
	}
};

/* Q5_K: Q4_K's octet (qs at block byte 48 + 32 (j/2) + l0) plus bit j of qh[l0 .. l0+7] (block
 * bytes 16 + l0 ..) as the fifth bit; x = (d * sc) * q - dmin * m. Blocks stored whole (176
 * bytes, 16-byte aligned). */
template <>
struct Kern<K_Q5_K> : UnitDot<Kern<K_Q5_K>> {
	static constexpr int UE = 8, U = 4;
	struct Raw {
		uint4 h;
		uint2 q, qh;
		int j;
	};
	/* unit u + 32k: every pointer + 176k */
	struct Ptr {
		const unsigned char *a, *b, *c;
		int j;
	};
	PV_HD static Ptr at(const RowP& p, int u)
	{
		const unsigned char* b = p.q0 + (size_t)(u >> 5) * 176;
		const int j = (u >> 2) & 7, l0 = 8 * (u & 3);
		return Ptr{ b, b + 48 + 32 * (j >> 1) + l0, b + 16 + l0, j };
	}
	PV_HD static Raw loadq(const Ptr& q, int k) { return Raw{ ldg<uint4>(q.a + 176 * k), ldw8(q.b + 176 * k), ldw8(q.c + 176 * k), q.j }; }
	PV_HD static Raw loadp(const RowP& p, int u) { return loadq(at(p, u), 0); }
	PV_HD static Raw load(const Seg& s, int64_t row, int u) { return loadp(rowp(s, row), u); }
	static constexpr int FORM = FORM_QOFF;
	PV_HD static void deq(const Raw& r, float* w, float& d, float& m)
	{
		float m1;
		k4_scales(r.h, r.j, &d, &m1);
		m = -m1;
PV_UNROLL
		for (int i = 0; i < 2; i++) {
			const uint32_t hb = (((i ? r.qh.y : r.qh.x) >> r.j) & 0x01010101u) << 4;
			const uint32_t v = (((i ? r.q.y : r.q.x) >> (4 * (r.j & 1))) & 0x0f0f0f0fu) | hb;
PV_UNROLL
			for (int k = 0; k < 4; k++) w[4 * i + k] = PV_FSUB(magic_byte(v, k), 8388608.0f);
		}
	}
};

/* Q6_K: unit u is the octet l0 = 8 (u % 4) .. l0+7 of element group k = u / 4 % 4 (elements
 * 32k + l) of half h = u / 16 % 2 of super-block u / 32: the low (k < 2) or high nibbles of
 * ql[64h + 32 (k & 1) + l0 ..] and bits 2k, 2k+1 of qh[32h + l0 ..] (one 8-byte load each),
 * minus 32; x = (d * sc) * q with sc = scales[8h + l0/16 + 2k] (pv_dequant_block's order). A
 * warp's 32 units are one super-block, so unit u + 32k is at fixed strides (ql/qh + 192k,
 * scales + 16k, d + 2k). */
template <>
struct Kern<K_Q6_K> : UnitDot<Kern<K_Q6_K>> {
	static constexpr int UE = 8, U = 4;
	struct Raw {
		uint2 ql, qh;
		int sc;
		unsigned int d;
		int k;
	};
	struct Ptr {
		const unsigned char *ql, *qh, *sc, *d;
		int k;
	};
	PV_HD static Ptr at(const RowP& p, int u)
	{
		const int sb = u >> 5, h = (u >> 4) & 1, k = (u >> 2) & 3, l0 = 8 * (u & 3);
		const unsigned char* q = p.q0 + (size_t)sb * 192;
		return Ptr{ q + 64 * h + 32 * (k & 1) + l0, q + 128 + 32 * h + l0, p.q1 + (size_t)sb * 16 + 8 * h + l0 / 16 + 2 * k,
			    p.q2 + (size_t)sb * 2, k };
	}
	PV_HD static Raw loadq(const Ptr& q, int n)
	{
		return Raw{ ldw8(q.ql + 192 * n), ldw8(q.qh + 192 * n), (int)ldg<signed char>(q.sc + 16 * n), ldw2(q.d + 2 * n), q.k };
	}
	PV_HD static Raw loadp(const RowP& p, int u) { return loadq(at(p, u), 0); }
	PV_HD static Raw load(const Seg& s, int64_t row, int u) { return loadp(rowp(s, row), u); }
	static constexpr int FORM = FORM_Q;
	PV_HD static void deq(const Raw& r, float* w, float& d, float& m)
	{
		m = 0.0f;
		d = PV_FMUL(f16f(r.d), (float)r.sc);
PV_UNROLL
		for (int i = 0; i < 2; i++) {
			const uint32_t l = i ? r.ql.y : r.ql.x, h = i ? r.qh.y : r.qh.x;
			const uint32_t v = ((l >> (4 * (r.k >> 1))) & 0x0f0f0f0fu) | (((h >> (2 * r.k)) & 0x03030303u) << 4);
PV_UNROLL
			for (int j = 0; j < 4; j++) w[4 * i + j] = PV_FSUB(magic_byte(v, j), 8388640.0f);
		}
	}
};


/* ---- a lane's walk over one column tile -------------------------------------------------- */

template <int K>
PV_HD typename Kern<K>::Raw load_unit(const Seg& s, int64_t row, int u, int stype)
{
	return Kern<K>::load(s, row, u);
}
template <>
PV_HD Kern<K_SCALAR>::Raw load_unit<K_SCALAR>(const Seg& s, int64_t row, int u, int stype)
{
	return Kern<K_SCALAR>::load_t(s, row, u, stype);
}

/* Lane `lane` of the warp that owns weight row `row`: its units u = lane (mod 32) among units
 * [u0, u1) of the staged tile (columns c0 .. c0 + tc, rows TT in xs), in increasing order, U
 * loads in flight. Because ownership is u mod 32 over the whole row, the walk over all tiles
 * visits the same units in the same order whatever the tile width. */
template <int K, int TT, bool PRE = false>
PV_HD void walk(const Seg& s, int stype, int64_t row, int lane, int u0, int u1, const float* xs, int tc, int c0, float* acc,
                const typename Kern<K>::Raw* pre = nullptr)
{
	using KT = Kern<K>;
	constexpr int UE = KT::UE, U = KT::U;
	const int uf = u0 + ((lane - u0) & 31); /* this lane's first unit in the tile */
	if constexpr (K >= K_Q8_0) {
		/* the quantized kinds: the row's pointers once, whole batches of U units without
		 * bounds checks, then the last partial batch (the same units in the same order) */
		const RowP rp = rowp(s, row);
		int ub = uf;
		if constexpr (PRE) {
			/* the first whole batch, loaded by walk_first before the PDL wait */
			if (ub + 32 * (U - 1) < u1) {
				PV_UNROLL
				for (int k = 0; k < U; k++) KT::template dot<TT>(pre[k], xs, tc, (ub + 32 * k) * UE - c0, acc);
				ub += 32 * U;
			}
		}
		for (; ub + 32 * (U - 1) < u1; ub += 32 * U) {
			typename KT::Raw raw[U];
			const typename KT::Ptr q = KT::at(rp, ub); /* unit ub + 32k: q's pointers + k strides */
			PV_UNROLL
			for (int k = 0; k < U; k++) raw[k] = KT::loadq(q, k);
			PV_UNROLL
			for (int k = 0; k < U; k++) KT::template dot<TT>(raw[k], xs, tc, (ub + 32 * k) * UE - c0, acc);
		}
		if (ub < u1) {
			typename KT::Raw raw[U] = {};
			PV_UNROLL
			for (int k = 0; k < U - 1; k++)
				if (ub + 32 * k < u1) raw[k] = KT::loadp(rp, ub + 32 * k);
			PV_UNROLL
			for (int k = 0; k < U - 1; k++)
				if (ub + 32 * k < u1) KT::template dot<TT>(raw[k], xs, tc, (ub + 32 * k) * UE - c0, acc);
		}
	} else {
		int ub = uf;
		if constexpr (PRE) {
			PV_UNROLL
			for (int k = 0; k < U; k++)
				if (ub + 32 * k < u1) KT::template dot<TT>(pre[k], xs, tc, (ub + 32 * k) * UE - c0, acc);
			ub += 32 * U;
		}
		for (; ub < u1; ub += 32 * U) {
			typename KT::Raw raw[U] = {};
			PV_UNROLL
			for (int k = 0; k < U; k++)
				if (ub + 32 * k < u1) raw[k] = load_unit<K>(s, row, ub + 32 * k, stype);
			PV_UNROLL
			for (int k = 0; k < U; k++)
				if (ub + 32 * k < u1) KT::template dot<TT>(raw[k], xs, tc, (ub + 32 * k) * UE - c0, acc);
		}
	}
}

/* The first batch of walk()'s units of a whole row (u0 = 0) for walk<K, TT, true>: loaded before
 * the PDL wait (the weights never depend on the previous kernel; cuda.gemv_early) */
template <int K>
PV_HD void walk_first(const Seg& s, int stype, int64_t row, int lane, int u1, typename Kern<K>::Raw* pre)
{
	using KT = Kern<K>;
	constexpr int U = KT::U;
	if constexpr (K >= K_Q8_0) {
		if (lane + 32 * (U - 1) < u1) {
			const typename KT::Ptr q = KT::at(rowp(s, row), lane);
			PV_UNROLL
			for (int k = 0; k < U; k++) pre[k] = KT::loadq(q, k);
		}
	} else {
		PV_UNROLL
		for (int k = 0; k < U; k++) pre[k] = lane + 32 * k < u1 ? load_unit<K>(s, row, lane + 32 * k, stype) : typename KT::Raw{};
	}
}

/* The in-place one-row walk (gemv.cu, Params::direct): the whole row is one tile (u0 = 0,
 * c0 = 0, xs = x itself), software-pipelined: lane `lane` issues the loads of its next U units
 * before it multiplies the current U, so 2U loads per lane are in flight instead of U, and the
 * loads overlap the dequantization (what bounds the quantized kinds). The units, their order and
 * the fmaf chain are walk()'s: the result is bitwise the same (test_cuda_host compares both with
 * the staged walks). Used with cuda.gemv_pipe = 1 (off by default; PERF.md v3). */
template <int K>
PV_HD void walk_direct(const Seg& s, int stype, int64_t row, int lane, int u1, const float* x, int ldx, float* acc)
{
	using KT = Kern<K>;
	constexpr int UE = KT::UE, U = KT::U;
	typename KT::Raw cur[U] = {}, nxt[U] = {};
	PV_UNROLL
	for (int k = 0; k < U; k++)
		if (lane + 32 * k < u1) cur[k] = load_unit<K>(s, row, lane + 32 * k, stype);
	for (int ub = lane; ub < u1; ub += 32 * U) {
		const int nb = ub + 32 * U;
		PV_UNROLL
		for (int k = 0; k < U; k++)
			if (nb + 32 * k < u1) nxt[k] = load_unit<K>(s, row, nb + 32 * k, stype);
		PV_UNROLL
		for (int k = 0; k < U; k++)
			if (ub + 32 * k < u1) KT::template dot<1>(cur[k], x, ldx, (ub + 32 * k) * UE, acc);
		PV_UNROLL
		for (int k = 0; k < U; k++) cur[k] = nxt[k];
	}
}

/* ---- the shared walk: R weight rows of a warp against the same staged activations ---------- */

/*
 * Multi-row GEMVs (verify windows, exact steps: 2-16 activation rows) are bound by the shared
 * memory reads of the staged activations, not by the weights: walk() reads a unit's TT staged
 * rows once per weight row, and with 8-element units at a 32-byte lane stride its reads conflict
 * (Nsight Compute: 8-way on average, 12.5 % occupancy and 2 % of DRAM on the 16-row BF16 GEMV;
 * docs/results/h200-2026-12-02-ncu-gemv-16rows.txt). The shared walk changes where things are,
 * not what is summed:
 *  - a lane loads the unit of each of its warp's R weight rows, then reads each staged row's
 *    activations once and uses them for all R rows (R times fewer shared-memory reads);
 *  - 8-element units are staged as two half planes (stage_at: quad 0 of tile unit uu at 4 uu,
 *    quad 1 at tc/2 + 4 uu), so the 32 lanes of a warp read 32 consecutive 16-byte vectors, no
 *    bank conflict; 4-element units are already consecutive.
 * Each weight row still sums its units u = lane (mod 32) in increasing order with walk()'s
 * per-unit expressions (dot_unit, written out for R rows in dot_rows), so the result is bitwise
 * walk()'s (test_cuda_host: the emulated kernels at 1..16 rows, R = 1, 2, 4).
 */

/* where column c of a staged tile of width tc lives (tc a multiple of UE) */
PV_HD int stage_at(int UE, int tc, int c)
{
	if (UE != 8) return c;
	return ((c >> 2) & 1) * (tc >> 1) + ((c >> 3) << 2) + (c & 3);
}

/* units in flight per lane and weight row in the shared walk: half the one-row walk's U, R times */
template <int K>
constexpr int SHARED_BATCH = Kern<K>::U >= 2 ? Kern<K>::U / 2 : 1;

/* raw[k][r]: unit ub + 32 k of weight row wrow + r, for units below u1 and rows below live
 * (zeros otherwise) */
template <int K, int R, int UB>
PV_HD void load_rows(const Seg& s, int stype, int64_t wrow, int live, int ub, int u1, typename Kern<K>::Raw (*raw)[R])
{
PV_UNROLL
	for (int k = 0; k < UB; k++)
PV_UNROLL
		for (int r = 0; r < R; r++)
			raw[k][r] = ub + 32 * k < u1 && r < live ? load_unit<K>(s, wrow + r, ub + 32 * k, stype) : typename Kern<K>::Raw{};
}

/* tile unit uu of R weight rows (raw[r]) against TT activation rows: acc[r][t] gets walk()'s
 * unit expression for row r and activation row t. ST: the rows staged in stage_at's layout, tc
 * floats apart; else the activations in place (gemv.cu, cuda.gemv_shared = 2), rows tc floats
 * apart, rows past tmax read as row tmax (their sums are never stored). */
template <int K, int TT, int R, bool ST>
PV_HD void dot_rows(const typename Kern<K>::Raw* raw, const float* xs, int tc, int uu, int tmax, float (*acc)[TT])
{
	using KT = Kern<K>;
	constexpr int UE = KT::UE;
	float w[R][UE], d[R], m[R];
PV_UNROLL
	for (int r = 0; r < R; r++) {
		d[r] = m[r] = 0.0f;
		KT::deq(raw[r], w[r], d[r], m[r]);
	}
PV_UNROLL
	for (int t = 0; t < TT; t++) {
		const float* xt = ST ? xs + t * tc : xs + (size_t)(t < tmax ? t : tmax) * tc;
		float x[UE];
		if constexpr (UE == 1) {
			x[0] = xt[uu];
		} else {
PV_UNROLL
			for (int g = 0; g < UE / 4; g++) {
				const float4 a = *reinterpret_cast<const float4*>(xt + (ST && UE == 8 ? g * (tc >> 1) + 4 * uu : UE * uu + 4 * g));
				x[4 * g] = a.x;
				x[4 * g + 1] = a.y;
				x[4 * g + 2] = a.z;
				x[4 * g + 3] = a.w;
			}
		}
		if constexpr (KT::FORM == FORM_FLOAT) {
PV_UNROLL
			for (int r = 0; r < R; r++) {
				float v = acc[r][t];
PV_UNROLL
				for (int e = 0; e < UE; e++) v = fmaf(w[r][e], x[e], v);
				acc[r][t] = v;
			}
		} else {
			float sx = x[0]; /* qdot_rows: the activations summed in element order */
PV_UNROLL
			for (int e = 1; e < UE; e++) sx = PV_FADD(sx, x[e]);
PV_UNROLL
			for (int r = 0; r < R; r++) {
				float v = PV_FMUL(w[r][0], x[0]);
PV_UNROLL
				for (int e = 1; e < UE; e++) v = fmaf(w[r][e], x[e], v);
				float a = fmaf(v, d[r], acc[r][t]);
				if constexpr (KT::FORM == FORM_QOFF) a = fmaf(m[r], sx, a);
				acc[r][t] = a;
			}
		}
	}
}

/* Lane `lane` of the warp owning weight rows wrow .. wrow + live - 1 (live <= R) over tile units
 * [u0, u1): its units u = lane (mod 32) in increasing order, SHARED_BATCH<K> units in flight
 * per row. raw holds the first batch (load_rows at this lane's first unit), loaded by the caller
 * before the tile was staged (or before the PDL wait) so that those loads overlap it. ST and
 * tmax: dot_rows' (in place: u0 = 0, xs the activations, tc their row stride). */
template <int K, int TT, int R, bool ST>
PV_HD void walk_rows(const Seg& s, int stype, int64_t wrow, int live, int lane, int u0, int u1, const float* xs, int tc,
                     int tmax, typename Kern<K>::Raw (*raw)[R], float (*acc)[TT])
{
	constexpr int UB = SHARED_BATCH<K>;
	for (int ub = u0 + ((lane - u0) & 31); ub < u1;) {
PV_UNROLL
		for (int k = 0; k < UB; k++)
			if (ub + 32 * k < u1) dot_rows<K, TT, R, ST>(raw[k], xs, tc, ub + 32 * k - u0, tmax, acc);
		ub += 32 * UB;
		if (ub < u1) load_rows<K, R, UB>(s, stype, wrow, live, ub, u1, raw);
	}
}

/* staged activations per GEMV block: 32 KiB */
constexpr int GEMV_SMEM_FLOATS = 8192;

/* the tile width a launch of TT rows uses (gemv.cu launch()); smem_floats per block */
static inline int tile_cols(int UE, int TT, int64_t cols, int smem_floats)
{
	int tc = smem_floats / TT;
	tc -= tc % (UE > 4 ? UE : 4);
	const int64_t need = (cols + 3) / 4 * 4;
	return need < tc ? (int)need : tc;
}

/* the warp's xor butterfly (pv_warp_sum) over 32 lane values, as a host function */
static inline float butterfly32(const float* v)
{
	float a[32];
	memcpy(a, v, sizeof a);
	for (int o = 16; o > 0; o >>= 1) {
		float b[32];
		for (int l = 0; l < 32; l++) b[l] = a[l] + a[l ^ o];
		memcpy(a, b, sizeof a);
	}
	return a[0];
}

/* ---- one element (the embedding lookup) ----------------------------------------------------- */

/* A device matrix as the kernels see it (common.cuh's struct dmat without the bookkeeping). */
struct Planes {
	const unsigned char *p0, *p1, *p2;
	size_t s0, s1, s2;
	int type;
};

PV_HD unsigned int u16at(const unsigned char* p) { return (unsigned int)p[0] | (unsigned int)p[1] << 8; }

/* Element (row, c) of a device matrix: the value pv_dequant_block gives (quant.h). */
PV_HD float dq_elem(const Planes& a, int64_t row, int c)
{
	const unsigned char* r0 = a.p0 + (size_t)row * a.s0;
	switch (a.type) {
	case PV_F32: return reinterpret_cast<const float*>(r0)[c];
	case PV_F16: return f16f(u16at(r0 + 2 * (size_t)c));
	case PV_BF16: return PV_U2F(u16at(r0 + 2 * (size_t)c) << 16);
	case PV_Q8_0: {
		const float d = f16f(u16at(a.p1 + (size_t)row * a.s1 + (size_t)(c / 32) * 2));
		return PV_FMUL((float)(int)(signed char)r0[c], d);
	}
	case PV_Q4_0: {
		const int b = c / 32, j = c % 32;
		const float d = f16f(u16at(a.p1 + (size_t)row * a.s1 + (size_t)b * 2));
		const int byte = r0[(size_t)b * 16 + (j & 15)];
		const int q = j < 16 ? byte & 0xf : byte >> 4;
		return PV_FMUL((float)(q - 8), d);
	}
	case PV_Q4_K: {
		const unsigned char* b = r0 + (size_t)(c / 256) * 144;
		const int w = c % 256, s = w / 32, l = w % 32;
		const float d = f16f(u16at(b)), dmin = f16f(u16at(b + 2));
		const unsigned char* q = b + 4;
		int sc, m;
		if (s < 4) {
			sc = q[s] & 63;
			m = q[s + 4] & 63;
		} else {
			sc = (q[s + 4] & 0xf) | ((q[s - 4] >> 6) << 4);
			m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
		}
		const int v = (b[16 + 32 * (s >> 1) + l] >> (4 * (s & 1))) & 0xf;
		const float d1 = PV_FMUL(d, (float)sc), m1 = PV_FMUL(dmin, (float)m);
		return PV_FSUB(PV_FMUL(d1, (float)v), m1);
	}
	case PV_Q6_K: {
		const int sb = c / 256, w = c % 256, h = w / 128, k = (w % 128) / 32, l = w % 32;
		const unsigned char* ql = r0 + (size_t)sb * 192 + 64 * h;
		const unsigned char* qh = r0 + (size_t)sb * 192 + 128 + 32 * h;
		const signed char* sc = reinterpret_cast<const signed char*>(a.p1 + (size_t)row * a.s1 + (size_t)sb * 16 + 8 * h);
		const float d = f16f(u16at(a.p2 + (size_t)row * a.s2 + (size_t)sb * 2));
		const int qlb = ql[l + 32 * (k & 1)];
		const int nib = k < 2 ? (qlb & 0xf) : (qlb >> 4);
		const int q = (nib | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
		return PV_FMUL(PV_FMUL(d, (float)sc[l / 16 + 2 * k]), (float)q);
	}
	case PV_Q4_1:
	case PV_Q5_0:
	case PV_Q5_1: {
		/* planes: qs | d,m (Q4_1); qs | qh | d (Q5_0); qs | qh | d,m (Q5_1) */
		const int b = c / 32, j = c % 32;
		const int byte = r0[(size_t)b * 16 + (j & 15)];
		int q = j < 16 ? byte & 0xf : byte >> 4;
		if (a.type != PV_Q4_1) {
			const unsigned char* qh = a.p1 + (size_t)row * a.s1 + (size_t)b * 4;
			q |= ((qh[j >> 3] >> (j & 7)) & 1) << 4;
		}
		const unsigned char* dp = a.type == PV_Q4_1 ? a.p1 + (size_t)row * a.s1 + (size_t)b * 4
		                                             : a.p2 + (size_t)row * a.s2 + (size_t)b * (a.type == PV_Q5_0 ? 2 : 4);
		const float d = f16f(u16at(dp));
		if (a.type == PV_Q5_0) return PV_FMUL((float)(q - 16), d);
		return PV_FADD(PV_FMUL((float)q, d), f16f(u16at(dp + 2)));
	}
	case PV_Q5_K: {
		const unsigned char* b = r0 + (size_t)(c / 256) * 176;
		const int w = c % 256, s = w / 32, l = w % 32;
		const float d = f16f(u16at(b)), dmin = f16f(u16at(b + 2));
		const unsigned char* q = b + 4;
		int sc, m;
		if (s < 4) {
			sc = q[s] & 63;
			m = q[s + 4] & 63;
		} else {
			sc = (q[s + 4] & 0xf) | ((q[s - 4] >> 6) << 4);
			m = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
		}
		const int v = ((b[48 + 32 * (s >> 1) + l] >> (4 * (s & 1))) & 0xf) | ((b[16 + l] >> s) & 1) << 4;
		const float d1 = PV_FMUL(d, (float)sc), m1 = PV_FMUL(dmin, (float)m);
		return PV_FSUB(PV_FMUL(d1, (float)v), m1);
	}
	default: return PV_U2F(0x7fc00000u); /* never: types are checked at upload */
	}
}


/* ---- the upload's plane split (host) -------------------------------------------------------- */

/* Bytes of plane p of one stored row (pv_dtype_row_bytes(type, cols) bytes at row) into dst:
 * Q8_0 qs | d, Q4_0 qs | d, Q4_1 qs | d,m, Q5_0 qs | qh | d, Q5_1 qs | qh | d,m, Q6_K
 * ql+qh | scales | d (common.cuh, struct dmat); other types (Q4_K, Q5_K, floats) are copied
 * whole (stride0 bytes). */
static inline void extract_plane(int type, int64_t cols, size_t stride0, int p, const unsigned char* row, unsigned char* dst)
{
	const int64_t nb32 = cols / 32, nb256 = cols / 256;
	switch (type) {
	case PV_Q8_0:
		for (int64_t b = 0; b < nb32; b++) {
			if (p == 0) memcpy(dst + 32 * b, row + 34 * b + 2, 32);
			else memcpy(dst + 2 * b, row + 34 * b, 2);
		}
		return;
	case PV_Q4_0:
		for (int64_t b = 0; b < nb32; b++) {
			if (p == 0) memcpy(dst + 16 * b, row + 18 * b + 2, 16);
			else memcpy(dst + 2 * b, row + 18 * b, 2);
		}
		return;
	case PV_Q4_1: /* d m qs[16] -> qs | d,m */
		for (int64_t b = 0; b < nb32; b++) {
			if (p == 0) memcpy(dst + 16 * b, row + 20 * b + 4, 16);
			else memcpy(dst + 4 * b, row + 20 * b, 4);
		}
		return;
	case PV_Q5_0: /* d qh[4] qs[16] -> qs | qh | d */
		for (int64_t b = 0; b < nb32; b++) {
			if (p == 0) memcpy(dst + 16 * b, row + 22 * b + 6, 16);
			else if (p == 1) memcpy(dst + 4 * b, row + 22 * b + 2, 4);
			else memcpy(dst + 2 * b, row + 22 * b, 2);
		}
		return;
	case PV_Q5_1: /* d m qh[4] qs[16] -> qs | qh | d,m */
		for (int64_t b = 0; b < nb32; b++) {
			if (p == 0) memcpy(dst + 16 * b, row + 24 * b + 8, 16);
			else if (p == 1) memcpy(dst + 4 * b, row + 24 * b + 4, 4);
			else memcpy(dst + 4 * b, row + 24 * b, 4);
		}
		return;
	case PV_Q6_K:
		for (int64_t b = 0; b < nb256; b++) {
			if (p == 0) memcpy(dst + 192 * b, row + 210 * b, 192);
			else if (p == 1) memcpy(dst + 16 * b, row + 210 * b + 192, 16);
			else memcpy(dst + 2 * b, row + 210 * b + 208, 2);
		}
		return;
	default:
		memcpy(dst, row, stride0);
		return;
	}
}

} // namespace pv_units

#endif
