/*
 * attention_prefill.cu: causal attention over T rows of a prompt chunk (prefill.cuh), two
 * kernels: attn_mma_kernel (the default, FlashAttention-2 on mma.sync, f16 inputs, f32
 * accumulation) and attn_kernel (f32 FMA on the CUDA cores: cuda.prefill_attn=f32, and the
 * precise mode), and the attention layer's driver around them (GEMMs, q/k norm + RoPE + KV write).
 * Both read the KV cache in the session's element type (f32, f16, bf16 or q8_0: common.cuh, "KV
 * cache element types") with vector loads, widened to f32 (attn_kernel) or to f16
 * (attn_mma_kernel) as they are staged in shared memory; the arithmetic after the staging is the
 * same for every type.
 */
#include "prefill.cuh"

#include <float.h>
#include <math.h>
#include <string.h>

namespace {

/*
 * Block (row tile, kv head kh), 128 threads: AQ = 32 query vectors, the G query heads of kh for
 * BQ = 32 / G consecutive rows (vector r: row t0 + r / G, head kh * G + r % G), so every K/V
 * tile is read once for all of them. Keys in tiles of AK = 32 positions, in increasing order,
 * from 0 to the block's last position (the KV cache holds earlier calls' and this chunk's rows,
 * written by qkv_post before). Thread (qi = tid / 4, kq = tid % 4) owns query vector qi:
 *   scores of keys kq, kq + 4, ... kq + 28 of the tile: one fmaf chain over d in order (float4
 *   steps), times 1/sqrt(hd); keys after the row's position are -inf;
 *   online softmax: m' = max(m, tile max) (the 4 threads' maxima by xor 1, 2), alpha = exp(m - m'),
 *   p = exp(s - m'), l = l * alpha + sum p (each thread's 8 in order, then xor 1, 2);
 *   o[d] for d in its float4s kq, kq + 4, ...: o = o * alpha, then one fmaf per key in key order.
 * Tile 0 always holds key 0 <= every row's position, so m is finite from the first tile on, and
 * a later tile whose keys are all masked gives p = 0, alpha = 1. Finally o / l (then the output
 * gate o * sigmoid(g), as the decode's combine), written as bf16 for o_proj.
 */
constexpr int AQ = 32, AK = 32, ATHREADS = 128, MAX_HD4 = 64;

struct pattn_args {
	const float* q;       /* [T][nh*hd]                                                     */
	const void *kc, *vc;  /* [n_ctx][nkv] head slices of type kvt (pv_kv_hbytes)             */
	int kvt;              /* PV_KV_F32, PV_KV_F16, PV_KV_BF16 or PV_KV_Q8_0                 */
	const float* gate;    /* [T][nh*hd] or NULL                                             */
	bf16 *o, *ol;         /* [T][ldo]; ol: the low halves (precise mode) or NULL            */
	int ldo, T, pos0, nh, nkv, hd, bq;
};

size_t attn_smem(int hd)
{
	return sizeof(float) * ((size_t)AQ * (hd + 4) + (size_t)AK * (hd + 4) + (size_t)AK * hd + (size_t)AQ * (AK + 1));
}

/* K and V of keys [j0, j0 + AK) of kv head kh (up to `last`, zeros after it) into shared memory as
 * f32: Ks [AK][ld], Vs [AK][hd]; one vector of the cache per thread and step */
template <int KVT>
__device__ __forceinline__ void stage_f32(const pattn_args& a, float* Ks, float* Vs, int ld, int j0, int last, int kh)
{
	constexpr int VE = pv_kv_vec<KVT>();
	const int hd = a.hd, hdv = hd / VE;
	const size_t HB = pv_kv_hbytes(KVT, hd), RB = (size_t)a.nkv * HB;
	for (int i = threadIdx.x; i < AK * hdv; i += ATHREADS) {
		const int j = i / hdv, dv = i - j * hdv;
		float kv[VE], vv[VE];
		if (j0 + j <= last) {
			const size_t off = (size_t)(j0 + j) * RB + (size_t)kh * HB;
			pv_kv_load<KVT>(static_cast<const char*>(a.kc) + off, dv, false, kv, hd);
			pv_kv_load<KVT>(static_cast<const char*>(a.vc) + off, dv, false, vv, hd);
		} else {
#pragma unroll
			for (int e = 0; e < VE; e++) kv[e] = vv[e] = 0.0f;
		}
#pragma unroll
		for (int h = 0; h < VE / 4; h++) {
			*reinterpret_cast<float4*>(Ks + j * ld + VE * dv + 4 * h) =
				make_float4(kv[4 * h], kv[4 * h + 1], kv[4 * h + 2], kv[4 * h + 3]);
			*reinterpret_cast<float4*>(Vs + j * hd + VE * dv + 4 * h) =
				make_float4(vv[4 * h], vv[4 * h + 1], vv[4 * h + 2], vv[4 * h + 3]);
		}
	}
}

__global__ void __launch_bounds__(ATHREADS) attn_kernel(const __grid_constant__ pattn_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	extern __shared__ float4 sm4[];
	const int hd = a.hd, hd4 = hd >> 2, G = a.nh / a.nkv, qd = a.nh * hd, ld = hd + 4;
	float* Qs = reinterpret_cast<float*>(sm4); /* [AQ][ld] */
	float* Ks = Qs + AQ * ld;                  /* [AK][ld] */
	float* Vs = Ks + AK * ld;                  /* [AK][hd] */
	float* Ps = Vs + AK * hd;                  /* [AQ][AK + 1] */
	const int kh = blockIdx.y, t0 = blockIdx.x * a.bq;
	const int nr = min(a.bq, a.T - t0); /* rows of this block */
	const int nq = nr * G;              /* valid query vectors */
	const int tid = threadIdx.x, qi = tid >> 2, kq = tid & 3;
	const int last = a.pos0 + t0 + nr - 1; /* the block's last key */
	const int qpos = a.pos0 + t0 + (qi < nq ? qi / G : 0);

	for (int i = tid; i < AQ * hd4; i += ATHREADS) {
		const int r = i / hd4, d4 = i - r * hd4;
		float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
		if (r < nq) {
			const int t = t0 + r / G, h = kh * G + r % G;
			v = reinterpret_cast<const float4*>(a.q + (size_t)t * qd + (size_t)h * hd)[d4];
		}
		*reinterpret_cast<float4*>(Qs + r * ld + 4 * d4) = v;
	}
	const float scale = 1.0f / sqrtf((float)hd);
	float m = -INFINITY, l = 0.0f;
	float4 acc[MAX_HD4 / 4];
#pragma unroll
	for (int i = 0; i < MAX_HD4 / 4; i++) acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);

	for (int j0 = 0; j0 <= last; j0 += AK) {
		__syncthreads(); /* Q written; the previous tile's K, V, P consumed */
		if (a.kvt == PV_KV_F32)
			stage_f32<PV_KV_F32>(a, Ks, Vs, ld, j0, last, kh);
		else if (a.kvt == PV_KV_F16)
			stage_f32<PV_KV_F16>(a, Ks, Vs, ld, j0, last, kh);
		else if (a.kvt == PV_KV_Q8_0)
			stage_f32<PV_KV_Q8_0>(a, Ks, Vs, ld, j0, last, kh);
		else
			stage_f32<PV_KV_BF16>(a, Ks, Vs, ld, j0, last, kh);
		__syncthreads();
		float sc[AK / 4];
#pragma unroll
		for (int u = 0; u < AK / 4; u++) sc[u] = 0.0f;
		for (int d = 0; d < hd; d += 4) {
			const float4 qv = *reinterpret_cast<const float4*>(Qs + qi * ld + d);
#pragma unroll
			for (int u = 0; u < AK / 4; u++) {
				const float4 kv = *reinterpret_cast<const float4*>(Ks + (kq + 4 * u) * ld + d);
				float s = sc[u];
				s = fmaf(qv.x, kv.x, s);
				s = fmaf(qv.y, kv.y, s);
				s = fmaf(qv.z, kv.z, s);
				s = fmaf(qv.w, kv.w, s);
				sc[u] = s;
			}
		}
		float mx = -INFINITY;
#pragma unroll
		for (int u = 0; u < AK / 4; u++) {
			const int j = j0 + kq + 4 * u;
			sc[u] = j <= qpos ? sc[u] * scale : -INFINITY;
			mx = fmaxf(mx, sc[u]);
		}
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
		mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
		const float mn = fmaxf(m, mx);
		const float alpha = expf(m - mn);
		float ps = 0.0f;
#pragma unroll
		for (int u = 0; u < AK / 4; u++) {
			const float p = expf(sc[u] - mn);
			Ps[qi * (AK + 1) + kq + 4 * u] = p;
			ps = ps + p;
		}
		ps = ps + __shfl_xor_sync(0xffffffffu, ps, 1);
		ps = ps + __shfl_xor_sync(0xffffffffu, ps, 2);
		l = l * alpha + ps;
		m = mn;
		__syncwarp(); /* a row's P is written and read by the 4 lanes of that row (one warp) */
#pragma unroll
		for (int i = 0; i < MAX_HD4 / 4; i++) {
			const int d4 = kq + 4 * i;
			if (d4 < hd4) {
				float4 o = acc[i];
				o.x = o.x * alpha;
				o.y = o.y * alpha;
				o.z = o.z * alpha;
				o.w = o.w * alpha;
				for (int j = 0; j < AK; j++) {
					const float p = Ps[qi * (AK + 1) + j];
					const float4 v = *reinterpret_cast<const float4*>(Vs + j * hd + 4 * d4);
					o.x = fmaf(p, v.x, o.x);
					o.y = fmaf(p, v.y, o.y);
					o.z = fmaf(p, v.z, o.z);
					o.w = fmaf(p, v.w, o.w);
				}
				acc[i] = o;
			}
		}
	}
	if (qi >= nq) return;
	const int t = t0 + qi / G, h = kh * G + qi % G;
	const float inv = 1.0f / l;
#pragma unroll
	for (int i = 0; i < MAX_HD4 / 4; i++) {
		const int d4 = kq + 4 * i;
		if (d4 < hd4) {
			float o[4] = { acc[i].x * inv, acc[i].y * inv, acc[i].z * inv, acc[i].w * inv };
			for (int c = 0; c < 4; c++) {
				const int d = 4 * d4 + c;
				if (a.gate) {
					const float g = a.gate[(size_t)t * qd + (size_t)h * hd + d];
					o[c] = o[c] * (1.0f / (1.0f + expf(-g))); /* pv_sigmoid, as forward.c */
				}
				put_bf16(a.o, a.ol, (size_t)t * a.ldo + (size_t)h * hd + d, o[c]);
			}
		}
	}
}

/*
 * The same attention on the tensor cores (mma.sync m16n8k16, f16 inputs, f32 accumulation), the
 * FlashAttention-2 scheme. Block (row tile, kv head kh), 8 warps, MQ = 128 query vectors (the G
 * heads of kh for BQ = 128 / G consecutive rows, vector r: row t0 + r / G, head kh * G + r % G;
 * 128 rather than 64 halves how often the K/V prefix is read and converted for long prompts);
 * warp w owns vectors 16 w .. 16 w + 15. Head dims are padded with zeros to HP = 16 NT (NT k-steps).
 * Shared memory, f16, rows of HS = HP + 8 halves (16-byte rows for ldmatrix, 8 rows on 8 distinct
 * bank groups): Q [MQ][HS] (scaled by 1/sqrt(hd) before rounding), K [64][HS], V [64][HS]
 * (hd 128: 70 KB, hd 256: 135 KB).
 * Per key tile of 64 positions (in order, up to the block's last row):
 *   S = Q K^T: 16 x 64 per warp, 8 n-tiles x NT k-steps; A (Q) and B (K, stored [key][d] =
 *   the "col" operand) by ldmatrix.x4;
 *   keys after a row's position are -inf; online softmax per row on f32 (the 4 lanes of a row
 *   group combined by xor 1, 2), P rounded to f16 and reused in registers as the A operand of
 *   O += P V (the C layout of two n-tiles is the A layout of one k-step); V by ldmatrix.x4.trans.
 * Fragment layouts (PTX ISA, m16n8k16, g = lane / 4, c = lane % 4): A regs {row g, cols 2c..2c+1},
 * {row g+8, same}, {row g, cols 2c+8..}, {row g+8, cols 2c+8..}; B regs {k 2c..2c+1, n g},
 * {k 2c+8.., n g}; C {row g, cols 2c, 2c+1}, {row g+8, cols 2c, 2c+1}.
 * Deterministic (the mma order is fixed); f16 rounding of q, k, v and p is the tolerance cost.
 */
constexpr int MQ = 128, MK = 64, MTHREADS = 256; /* MTHREADS = 32 x MQ / 16 */

__device__ __forceinline__ void ldsm_x4_t(uint32_t* r, const __half* p)
{
	const unsigned a = (unsigned)__cvta_generic_to_shared(p);
	asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
	             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
	             : "r"(a));
}

/* d += a b (m16n8k16, f16 in, f32 accumulate) */
__device__ __forceinline__ void mma16816(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
	             "{%0, %1, %2, %3};"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_h2(float lo, float hi)
{
	const __half2 h = __floats2half2_rn(lo, hi); /* .x (low 16 bits) = lo */
	return *reinterpret_cast<const uint32_t*>(&h);
}

/* 8 bf16 words to 8 f16 words (through f32, pack_h2's rounding), in place order */
__device__ __forceinline__ uint4 bf16x8_to_f16x8(uint4 x)
{
	const uint32_t w[4] = { x.x, x.y, x.z, x.w };
	uint32_t o[4];
#pragma unroll
	for (int i = 0; i < 4; i++) o[i] = pack_h2(pv_kv_widen<PV_KV_BF16>(w[i]), pv_kv_widen<PV_KV_BF16>(w[i] >> 16));
	return make_uint4(o[0], o[1], o[2], o[3]);
}

size_t mma_smem(int NT) { return sizeof(__half) * (size_t)(MQ + 2 * MK) * (size_t)(16 * NT + 8); }

template <int NT>
__global__ void __launch_bounds__(MTHREADS) attn_mma_kernel(const __grid_constant__ pattn_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	constexpr int HP = 16 * NT, HS = HP + 8;
	extern __shared__ float4 sm4[];
	__half* Qs = reinterpret_cast<__half*>(sm4); /* [MQ][HS] */
	__half* Ks = Qs + MQ * HS;                   /* [MK][HS] */
	__half* Vs = Ks + MK * HS;                   /* [MK][HS] */
	const int hd = a.hd, G = a.nh / a.nkv, kvd = a.nkv * hd, qd = a.nh * hd;
	const int kh = blockIdx.y, t0 = blockIdx.x * a.bq;
	const int nr = min(a.bq, a.T - t0), nq = nr * G;
	const int last = a.pos0 + t0 + nr - 1;
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
	const float scale = 1.0f / sqrtf((float)hd);

	for (int i = tid; i < MQ * (HP / 2); i += MTHREADS) {
		const int r = i / (HP / 2), d = 2 * (i - r * (HP / 2));
		float x0 = 0.0f, x1 = 0.0f;
		if (r < nq && d < hd) { /* hd is a multiple of 4: d + 1 < hd too */
			const float* q = a.q + (size_t)(t0 + r / G) * qd + (size_t)(kh * G + r % G) * hd;
			x0 = q[d] * scale;
			x1 = q[d + 1] * scale;
		}
		*reinterpret_cast<__half2*>(Qs + r * HS + d) = __floats2half2_rn(x0, x1);
	}
	const int ra = warp * 16 + g, rb = ra + 8; /* this thread's two query vectors */
	const int pa = a.pos0 + t0 + (ra < nq ? ra / G : 0), pb = a.pos0 + t0 + (rb < nq ? rb / G : 0);
	float o[2 * NT][4];
#pragma unroll
	for (int i = 0; i < 2 * NT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
	float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;

	for (int j0 = 0; j0 <= last; j0 += MK) {
		__syncthreads(); /* Q written; the previous tile's K and V consumed */
		if (a.kvt == PV_KV_F32) {
			const float* kc = static_cast<const float*>(a.kc);
			const float* vc = static_cast<const float*>(a.vc);
			for (int i = tid; i < MK * (HP / 4); i += MTHREADS) {
				const int j = i / (HP / 4), d = 4 * (i - j * (HP / 4));
				float4 kv = make_float4(0.0f, 0.0f, 0.0f, 0.0f), vv = kv;
				if (j0 + j <= last && d < hd) {
					const size_t off = (size_t)(j0 + j) * kvd + (size_t)kh * hd + d;
					kv = __ldg(reinterpret_cast<const float4*>(kc + off));
					vv = __ldg(reinterpret_cast<const float4*>(vc + off));
				}
				*reinterpret_cast<uint2*>(Ks + j * HS + d) = make_uint2(pack_h2(kv.x, kv.y), pack_h2(kv.z, kv.w));
				*reinterpret_cast<uint2*>(Vs + j * HS + d) = make_uint2(pack_h2(vv.x, vv.y), pack_h2(vv.z, vv.w));
			}
		} else if (a.kvt == PV_KV_Q8_0) {
			/* q8_0: 8 codes and their scale per step (hd a multiple of 8: session.cu), d q
			 * (exact in f32) rounded to f16 as an f32 cache's values are */
			const size_t HB = pv_kv_hbytes(PV_KV_Q8_0, hd), RB = (size_t)a.nkv * HB;
			const char* kc = static_cast<const char*>(a.kc);
			const char* vc = static_cast<const char*>(a.vc);
			for (int i = tid; i < MK * (HP / 8); i += MTHREADS) {
				const int j = i / (HP / 8), d = 8 * (i - j * (HP / 8));
				uint4 kw = make_uint4(0u, 0u, 0u, 0u), vw = kw;
				if (j0 + j <= last && d < hd) {
					const size_t off = (size_t)(j0 + j) * RB + (size_t)kh * HB;
					float kf[8], vf[8];
					pv_kv_load<PV_KV_Q8_0>(kc + off, d / 8, false, kf, hd);
					pv_kv_load<PV_KV_Q8_0>(vc + off, d / 8, false, vf, hd);
					kw = make_uint4(pack_h2(kf[0], kf[1]), pack_h2(kf[2], kf[3]), pack_h2(kf[4], kf[5]), pack_h2(kf[6], kf[7]));
					vw = make_uint4(pack_h2(vf[0], vf[1]), pack_h2(vf[2], vf[3]), pack_h2(vf[4], vf[5]), pack_h2(vf[6], vf[7]));
				}
				*reinterpret_cast<uint4*>(Ks + j * HS + d) = kw;
				*reinterpret_cast<uint4*>(Vs + j * HS + d) = vw;
			}
		} else {
			/* 16-bit cache: 8 elements per uint4; f16 goes in as stored (the f16 rounding of an
			 * f16 value is itself), bf16 is widened to f32 and rounded to f16 as an f32 cache's
			 * values are (hd a multiple of 8: session.cu) */
			const uint16_t* kc = static_cast<const uint16_t*>(a.kc);
			const uint16_t* vc = static_cast<const uint16_t*>(a.vc);
			const bool bf = a.kvt == PV_KV_BF16;
			for (int i = tid; i < MK * (HP / 8); i += MTHREADS) {
				const int j = i / (HP / 8), d = 8 * (i - j * (HP / 8));
				uint4 kw = make_uint4(0u, 0u, 0u, 0u), vw = kw;
				if (j0 + j <= last && d < hd) {
					const size_t off = (size_t)(j0 + j) * kvd + (size_t)kh * hd + d;
					kw = __ldg(reinterpret_cast<const uint4*>(kc + off));
					vw = __ldg(reinterpret_cast<const uint4*>(vc + off));
					if (bf) {
						kw = bf16x8_to_f16x8(kw);
						vw = bf16x8_to_f16x8(vw);
					}
				}
				*reinterpret_cast<uint4*>(Ks + j * HS + d) = kw;
				*reinterpret_cast<uint4*>(Vs + j * HS + d) = vw;
			}
		}
		__syncthreads();
		float s[8][4];
#pragma unroll
		for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
		for (int kk = 0; kk < NT; kk++) {
			uint32_t qa[4];
			ldsm_x4(qa, Qs + (warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * HS + 16 * kk + 8 * (lane >> 4));
#pragma unroll
			for (int n2 = 0; n2 < 4; n2++) {
				uint32_t kb[4];
				ldsm_x4(kb,
				        Ks + (16 * n2 + (lane & 7) + 8 * (lane >> 4)) * HS + 16 * kk + 8 * ((lane >> 3) & 1));
				mma16816(s[2 * n2], qa, kb[0], kb[1]);
				mma16816(s[2 * n2 + 1], qa, kb[2], kb[3]);
			}
		}
		float mxa = -INFINITY, mxb = -INFINITY;
#pragma unroll
		for (int nt = 0; nt < 8; nt++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int key = j0 + 8 * nt + 2 * c + e;
				if (key > pa) s[nt][e] = -INFINITY;
				if (key > pb) s[nt][2 + e] = -INFINITY;
				mxa = fmaxf(mxa, s[nt][e]);
				mxb = fmaxf(mxb, s[nt][2 + e]);
			}
		mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 1));
		mxa = fmaxf(mxa, __shfl_xor_sync(0xffffffffu, mxa, 2));
		mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 1));
		mxb = fmaxf(mxb, __shfl_xor_sync(0xffffffffu, mxb, 2));
		const float na = fmaxf(ma, mxa), nb = fmaxf(mb, mxb); /* finite: tile 0 holds key 0 */
		const float aa = expf(ma - na), ab = expf(mb - nb);
		float sa = 0.0f, sb = 0.0f;
#pragma unroll
		for (int nt = 0; nt < 8; nt++) {
			s[nt][0] = expf(s[nt][0] - na);
			s[nt][1] = expf(s[nt][1] - na);
			s[nt][2] = expf(s[nt][2] - nb);
			s[nt][3] = expf(s[nt][3] - nb);
			sa = sa + s[nt][0];
			sa = sa + s[nt][1];
			sb = sb + s[nt][2];
			sb = sb + s[nt][3];
		}
		sa = sa + __shfl_xor_sync(0xffffffffu, sa, 1);
		sa = sa + __shfl_xor_sync(0xffffffffu, sa, 2);
		sb = sb + __shfl_xor_sync(0xffffffffu, sb, 1);
		sb = sb + __shfl_xor_sync(0xffffffffu, sb, 2);
		la = la * aa + sa;
		lb = lb * ab + sb;
		ma = na;
		mb = nb;
#pragma unroll
		for (int i = 0; i < 2 * NT; i++) {
			o[i][0] = o[i][0] * aa;
			o[i][1] = o[i][1] * aa;
			o[i][2] = o[i][2] * ab;
			o[i][3] = o[i][3] * ab;
		}
#pragma unroll
		for (int ks = 0; ks < MK / 16; ks++) {
			uint32_t pf[4] = { pack_h2(s[2 * ks][0], s[2 * ks][1]), pack_h2(s[2 * ks][2], s[2 * ks][3]),
				           pack_h2(s[2 * ks + 1][0], s[2 * ks + 1][1]),
				           pack_h2(s[2 * ks + 1][2], s[2 * ks + 1][3]) };
#pragma unroll
			for (int d2 = 0; d2 < NT; d2++) {
				uint32_t vb[4];
				ldsm_x4_t(vb,
				          Vs + (16 * ks + (lane & 7) + 8 * ((lane >> 3) & 1)) * HS + 16 * d2 + 8 * (lane >> 4));
				mma16816(o[2 * d2], pf, vb[0], vb[1]);
				mma16816(o[2 * d2 + 1], pf, vb[2], vb[3]);
			}
		}
	}
	const float ia = 1.0f / la, ib = 1.0f / lb;
#pragma unroll
	for (int half = 0; half < 2; half++) {
		const int r = half ? rb : ra;
		if (r >= nq) continue;
		const int t = t0 + r / G, h = kh * G + r % G;
		const float inv = half ? ib : ia;
#pragma unroll
		for (int i = 0; i < 2 * NT; i++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int d = 8 * i + 2 * c + e;
				if (d >= hd) continue;
				float v = o[i][2 * half + e] * inv;
				if (a.gate) {
					const float gt = a.gate[(size_t)t * qd + (size_t)h * hd + d];
					v = v * (1.0f / (1.0f + expf(-gt))); /* pv_sigmoid, as forward.c */
				}
				put_bf16(a.o, a.ol, (size_t)t * a.ldo + (size_t)h * hd + d, v);
			}
	}
}

typedef void (*attn_fn)(pattn_args);

/* the tensor-core kernel for head dims padded to 16 NT (NT 1-8, 16), else NULL */
attn_fn mma_kernel(int NT)
{
	switch (NT) {
	case 1: return attn_mma_kernel<1>;
	case 2: return attn_mma_kernel<2>;
	case 3: return attn_mma_kernel<3>;
	case 4: return attn_mma_kernel<4>;
	case 5: return attn_mma_kernel<5>;
	case 6: return attn_mma_kernel<6>;
	case 7: return attn_mma_kernel<7>;
	case 8: return attn_mma_kernel<8>;
	case 16: return attn_mma_kernel<16>;
	default: return NULL;
	}
}

} // namespace

int pv_prefill_attention_init(int head_dim, char* err, size_t errlen)
{
	CU(cudaFuncSetAttribute(attn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)attn_smem(head_dim)), err,
	   errlen);
	const int NT = (head_dim + 15) / 16;
	if (mma_kernel(NT))
		CU(cudaFuncSetAttribute(mma_kernel(NT), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)mma_smem(NT)), err,
		   errlen);
	return 0;
}

int pv_prefill_attention_layer(struct pv_prefill_ctx* k, const struct dlayer* L, int l, int ci, int pos0, int T)
{
	struct pv_prefill* p = k->p;
	struct dsession* v = k->d;
	const struct pv_config* c = k->c;
	const int H = c->hidden, kvd = pv_cfg_kv_dim(c);
	if (pv_prefill_gemm(k, &L->wq, p->xb, p->ldh, p->qraw, v->ldq, T) ||
	    pv_prefill_gemm(k, &L->wk, p->xb, p->ldh, p->kraw, kvd, T) ||
	    pv_prefill_gemm(k, &L->wv, p->xb, p->ldh, p->vraw, kvd, T))
		return -1;
	if (pv_prefill_bias(k, p->qraw, v->ldq, L->bq, (int)L->wq.rows, T) || pv_prefill_bias(k, p->kraw, kvd, L->bk, kvd, T) ||
	    pv_prefill_bias(k, p->vraw, kvd, L->bv, kvd, T))
		return -1;
	struct qkv_post_args a;
	a.qraw = p->qraw;
	a.kraw = p->kraw;
	a.vraw = p->vraw;
	a.ldq = v->ldq;
	a.gated = c->attn_gate;
	a.q_norm = L->q_norm;
	a.k_norm = L->k_norm;
	a.cos = v->cos;
	a.sin = v->sin;
	a.q = p->q;
	a.gate = p->gate;
	a.kc = v->kc[l];
	a.vc = v->vc[l];
	a.kvt = v->kvt;
	a.nh = c->n_heads;
	a.nkv = c->n_kv_heads;
	a.hd = c->head_dim;
	a.R = c->rope_dim;
	a.eps = c->rms_eps;
	a.step = p->steps + ci; /* pos0 of this chunk */
	if (pv_cuda_qkv_post(v->st, &v->tu, &a, T, k->err, k->errlen)) return -1;
	p->nl++;
	pattn_args b;
	b.q = p->q;
	b.kc = v->kc[l];
	b.vc = v->vc[l];
	b.kvt = v->kvt;
	b.gate = c->attn_gate ? p->gate : NULL;
	b.o = p->ob;
	b.ol = pv_prefill_lo(p, p->ob);
	b.ldo = p->ldo;
	b.T = T;
	b.pos0 = pos0;
	b.nh = c->n_heads;
	b.nkv = c->n_kv_heads;
	b.hd = c->head_dim;
	const int G = c->n_heads / c->n_kv_heads, NT = (c->head_dim + 15) / 16;
	if (AQ / G < 1 || c->head_dim % (v->kvt == PV_KV_F32 ? 4 : 8) || c->head_dim / 4 > MAX_HD4 || v->kvt < PV_KV_F32 ||
	    v->kvt > PV_KV_Q8_0)
		return pv_errf(k->err, k->errlen, "CUDA backend: prefill attention: %d heads per kv head, head dim %d", G,
		               c->head_dim);
	const attn_fn mk = v->tu.prefill_attn == 1 || p->split ? NULL : mma_kernel(NT);
	if (mk) {
		b.bq = MQ / G;
		const dim3 grid((unsigned)((T + b.bq - 1) / b.bq), (unsigned)c->n_kv_heads);
		PV_LAUNCH("prefill attention", &k->d->tu, k->err, k->errlen, mk, grid, dim3(MTHREADS), mma_smem(NT), v->st, b);
	} else {
		b.bq = AQ / G;
		const dim3 grid((unsigned)((T + b.bq - 1) / b.bq), (unsigned)c->n_kv_heads);
		PV_LAUNCH("prefill attention", &k->d->tu, k->err, k->errlen, attn_kernel, grid, dim3(ATHREADS),
		          attn_smem(c->head_dim), v->st, b);
	}
	p->nl++;
	return pv_prefill_gemm(k, &L->wo, p->ob, p->ldo, p->delta, H, T);
}
