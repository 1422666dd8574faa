/*
 * moe_prefill.cu: the MoE FFN over T rows of a prompt chunk (prefill.cuh): routing for the T
 * rows, a one-block sort of the (row, slot) pairs by expert, grouped expert GEMMs on mma.sync
 * (ggemm_kernel), the shared expert as GEMMs, the decode's combine; or (cuda.prefill_moe=gemv)
 * the decode's kernels in 16-row groups.
 */
#include "prefill.cuh"

#include <string.h>

namespace {

/* ---- MoE: slots sorted by expert, grouped expert GEMMs ------------------------------------ */

/*
 * Sort (one block): cnt[e] = slots q (q = t k + j < nslots) with idx[q] == e; off = exclusive
 * prefix of cnt; perm[off[e] ..] = those slots in increasing q (thread e scans all slots in
 * order: deterministic, no atomics); row tiles of 64 sorted slots per expert, (e, first), in
 * expert order, and their count. The slots are staged through shared memory SORT_CHUNK at a time
 * and read 4 per load, every thread the same address (a broadcast); the scans used to read idx
 * from global memory (ledger: cuda-moe-sort-staged).
 */
constexpr int SORT_THREADS = 1024;
constexpr int SORT_CHUNK = 4096; /* slots staged per pass (16 KB) */

__device__ __forceinline__ int sort_stage(const int* idx, int nslots, int base, int* chunk)
{
	const int len = min(SORT_CHUNK, nslots - base);
	__syncthreads(); /* the previous chunk is consumed */
	for (int i = threadIdx.x; i < len; i += SORT_THREADS) chunk[i] = idx[base + i];
	for (int i = len + threadIdx.x; i < (len + 3) / 4 * 4; i += SORT_THREADS) chunk[i] = -1; /* no expert */
	__syncthreads();
	return len;
}

__global__ void __launch_bounds__(SORT_THREADS)
        moe_sort_kernel(const int* idx, int nslots, int E, int* off, int* perm, int2* tiles, int* ntiles)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	extern __shared__ int4 si4[];
	int* chunk = reinterpret_cast<int*>(si4); /* [SORT_CHUNK], 16-byte aligned */
	int* cnt = chunk + SORT_CHUNK;            /* [E]     */
	int* soff = cnt + E;                      /* [E + 1] */
	int* toff = soff + E + 1;                 /* [E]     */
	int* wpos = toff + E;                     /* [E]     */
	for (int e = threadIdx.x; e < E; e += SORT_THREADS) cnt[e] = 0;
	for (int base = 0; base < nslots; base += SORT_CHUNK) {
		const int len = sort_stage(idx, nslots, base, chunk);
		const int4* c4 = reinterpret_cast<const int4*>(chunk);
		for (int e = threadIdx.x; e < E; e += SORT_THREADS) {
			int n = 0;
			for (int q = 0; q < (len + 3) / 4; q++) {
				const int4 v = c4[q];
				n += (v.x == e) + (v.y == e) + (v.z == e) + (v.w == e);
			}
			cnt[e] += n;
		}
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		int o = 0, to = 0;
		for (int e = 0; e < E; e++) {
			soff[e] = o;
			toff[e] = to;
			o += cnt[e];
			to += (cnt[e] + 63) / 64;
		}
		soff[E] = o;
		off[E] = o;
		*ntiles = to;
	}
	__syncthreads();
	for (int e = threadIdx.x; e < E; e += SORT_THREADS) {
		off[e] = soff[e];
		wpos[e] = soff[e];
		for (int i = 0; i < (cnt[e] + 63) / 64; i++) tiles[toff[e] + i] = make_int2(e, soff[e] + 64 * i);
	}
	for (int base = 0; base < nslots; base += SORT_CHUNK) {
		const int len = sort_stage(idx, nslots, base, chunk);
		for (int e = threadIdx.x; e < E; e += SORT_THREADS) {
			const int4* c4 = reinterpret_cast<const int4*>(chunk);
			int w = wpos[e];
			for (int q = 0; q < (len + 3) / 4; q++) { /* the padding (-1) matches no expert */
				const int4 v = c4[q];
				if (v.x == e) perm[w++] = base + 4 * q;
				if (v.y == e) perm[w++] = base + 4 * q + 1;
				if (v.z == e) perm[w++] = base + 4 * q + 2;
				if (v.w == e) perm[w++] = base + 4 * q + 3;
			}
			wpos[e] = w;
		}
	}
}

/*
 * Grouped GEMM: for row tile (expert e, sorted slots s0 .. s0 + 63 of e) and output columns
 * n0 .. n0 + 63: Y[q][n] = sum_i X[row(q)][i] W_e[n][i], q = perm[s], row(q) = q (by_slot) or
 * q / k. W_e is rows e N .. e N + N - 1 of the stacked matrix, in its stored type, dequantized
 * to bf16 on its way into shared memory (BF16: copied; Q8_0: d * q per 16-byte load; other types
 * or widths: units.cuh's dq_elem per element). 4 warps; warp w computes rows 16 w .. 16 w + 15 x
 * 64 columns with mma.sync m16n8k16 (bf16 in, f32 accumulation), k-steps of 32 in order.
 * Blocks past the tile count exit at once (the grid is sized for the most tiles possible).
 */
constexpr int GM = 64, GN = 64, GK = 32, GS = GK + 8; /* GS: shared row stride (bf16), 80 bytes */
enum { W_GENERIC = 0, W_BF16, W_Q8_0 };

struct ggemm_args {
	const bf16* x; /* activation rows, ld ldx (a multiple of 8)                   */
	int ldx, by_slot, k;
	int accumulate; /* Y += the product (the precise mode's low-half passes)               */
	int wlo;        /* the weights' low halves, bf16(v - bf16(v)), instead of bf16(v)      */
	const int *perm, *off, *ntiles;
	const int2* tiles;
	pv_units::Planes w[2]; /* stacked expert matrices [E N][K]; blockIdx.z picks one      */
	float* y[2];           /* [slots][ldy]                                                */
	int ldy, N, K, wkind;
};
__device__ __forceinline__ void mma_bf16(float* d, const uint32_t* a, uint32_t b0, uint32_t b1)
{
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
	             "{%0, %1, %2, %3};"
	             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
	             : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* what rounding v to bf16 leaves (exact in f32): the split weights' low half, before its own rounding */
__device__ __forceinline__ float low_half(float v) { return __fsub_rn(v, __bfloat162float(__float2bfloat16_rn(v))); }

__device__ __forceinline__ uint32_t pack_bf2(float lo, float hi)
{
	const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi); /* .x (low 16 bits) = lo */
	return *reinterpret_cast<const uint32_t*>(&h);
}

/* 16 Q8_0 weights (qv, scale d) as bf16 at dst (16-byte aligned): bf16(q d), or with wlo the low
 * halves bf16(q d - bf16(q d)); qv = 0, d = 0 gives zeros. Both loaders convert through this. */
__device__ __forceinline__ void q8_to_bf16(uint4 qv, float d, int wlo, bf16* dst)
{
	float f[16];
#pragma unroll
	for (int i = 0; i < 16; i++) {
		const uint32_t wd = pv_units::word(qv, i >> 2);
		f[i] = __fmul_rn((float)(int)(signed char)((wd >> (8 * (i & 3))) & 0xffu), d);
		if (wlo) f[i] = low_half(f[i]);
	}
	*reinterpret_cast<uint4*>(dst) = make_uint4(pack_bf2(f[0], f[1]), pack_bf2(f[2], f[3]), pack_bf2(f[4], f[5]),
	                                            pack_bf2(f[6], f[7]));
	*reinterpret_cast<uint4*>(dst + 8) = make_uint4(pack_bf2(f[8], f[9]), pack_bf2(f[10], f[11]),
	                                                pack_bf2(f[12], f[13]), pack_bf2(f[14], f[15]));
}

/* acc (warp w: rows 16 w .. 16 w + 15 x 64 columns) += As (64 x 32) Bs^T (64 x 32), both with row
 * stride GS: two k16 MMAs per 8 columns, k in order */
__device__ __forceinline__ void tile_mma(float (&acc)[8][4], const bf16* As, const bf16* Bs, int warp, int lane)
{
#pragma unroll
	for (int kk = 0; kk < GK; kk += 16) {
		uint32_t af[4];
		ldsm_x4(af, reinterpret_cast<const __half*>(As + (warp * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * GS + kk +
		                                            8 * (lane >> 4)));
#pragma unroll
		for (int n2 = 0; n2 < 4; n2++) {
			uint32_t bf[4];
			ldsm_x4(bf, reinterpret_cast<const __half*>(Bs + (16 * n2 + (lane & 7) + 8 * (lane >> 4)) * GS + kk +
			                                            8 * ((lane >> 3) & 1)));
			mma_bf16(acc[2 * n2], af, bf[0], bf[1]);
			mma_bf16(acc[2 * n2 + 1], af, bf[2], bf[3]);
		}
	}
}

/* Y[slot][n0 ..] = acc (or += with a.accumulate), rows of unused slots (-1) and columns past N skipped */
__device__ __forceinline__ void tile_store(const ggemm_args& a, const float (&acc)[8][4], const int* slot, int n0, int warp,
                                           int g, int c)
{
	float* Y = a.y[blockIdx.z];
#pragma unroll
	for (int half = 0; half < 2; half++) {
		const int q = slot[warp * 16 + g + 8 * half];
		if (q < 0) continue;
#pragma unroll
		for (int nt = 0; nt < 8; nt++)
#pragma unroll
			for (int e2 = 0; e2 < 2; e2++) {
				const int n = n0 + 8 * nt + 2 * c + e2;
				if (n < a.N) {
					float* yp = Y + (size_t)q * a.ldy + n;
					*yp = a.accumulate ? *yp + acc[nt][2 * half + e2] : acc[nt][2 * half + e2];
				}
			}
	}
}

__global__ void __launch_bounds__(128) ggemm_kernel(const __grid_constant__ ggemm_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	__shared__ __align__(16) bf16 As[GM * GS];
	__shared__ __align__(16) bf16 Bs[GN * GS];
	__shared__ int slot[GM];
	const int tile = blockIdx.y;
	if (tile >= *a.ntiles) return; /* the whole block */
	const int2 tl = a.tiles[tile];
	const int e = tl.x, s0 = tl.y, cnt = min(GM, a.off[e + 1] - s0);
	const int n0 = blockIdx.x * GN, z = blockIdx.z;
	const pv_units::Planes W = a.w[z];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
	const int N = a.N, K = a.K;
	if (tid < GM) slot[tid] = tid < cnt ? a.perm[s0 + tid] : -1;
	__syncthreads();
	float acc[8][4];
#pragma unroll
	for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

	for (int k0 = 0; k0 < K; k0 += GK) {
		/* A: 64 rows x 32 columns, 8 bf16 per thread item */
		for (int ch = tid; ch < GM * GK / 8; ch += 128) {
			const int r = ch / (GK / 8), cc = (ch - r * (GK / 8)) * 8;
			uint4 v = make_uint4(0u, 0u, 0u, 0u);
			const int q = slot[r];
			if (q >= 0) {
				const bf16* src = a.x + (size_t)(a.by_slot ? q : q / a.k) * a.ldx + k0 + cc;
				if (k0 + cc + 8 <= K) {
					v = *reinterpret_cast<const uint4*>(src);
				} else {
					unsigned short h[8];
					for (int i = 0; i < 8; i++)
						h[i] = k0 + cc + i < K ? reinterpret_cast<const unsigned short*>(src)[i] : 0;
					v = make_uint4(h[0] | (uint32_t)h[1] << 16, h[2] | (uint32_t)h[3] << 16,
					               h[4] | (uint32_t)h[5] << 16, h[6] | (uint32_t)h[7] << 16);
				}
			}
			*reinterpret_cast<uint4*>(As + r * GS + cc) = v;
		}
		/* B: weight rows n0 .. n0 + 63 of expert e, columns k0 .. k0 + 31, as bf16 */
		if (a.wkind == W_Q8_0) { /* K % 32 == 0: one block per row and step; thread: row tid / 2, half tid % 2 */
			const int r = tid >> 1, hh = tid & 1;
			uint4 qv = make_uint4(0u, 0u, 0u, 0u);
			float d = 0.0f;
			if (n0 + r < N) {
				const int64_t row = (int64_t)e * N + n0 + r;
				qv = __ldg(reinterpret_cast<const uint4*>(W.p0 + (size_t)row * W.s0 + k0 + 16 * hh));
				d = pv_units::f16f(pv_units::u16at(W.p1 + (size_t)row * W.s1 + (size_t)(k0 / 32) * 2));
			}
			q8_to_bf16(qv, d, a.wlo, Bs + r * GS + 16 * hh); /* a row past N: zeros */
		} else if (a.wkind == W_BF16) { /* K % 8 == 0: 16-byte rows pieces */
			for (int ch = tid; ch < GN * GK / 8; ch += 128) {
				const int r = ch / (GK / 8), cc = (ch - r * (GK / 8)) * 8;
				uint4 v = make_uint4(0u, 0u, 0u, 0u);
				if (n0 + r < N && k0 + cc < K) /* K % 8 == 0: the piece is whole */
					v = __ldg(reinterpret_cast<const uint4*>(
					        W.p0 + (size_t)((int64_t)e * N + n0 + r) * W.s0 + (size_t)(k0 + cc) * 2));
				*reinterpret_cast<uint4*>(Bs + r * GS + cc) = v;
			}
		} else {
			for (int i = tid; i < GN * GK; i += 128) {
				const int r = i / GK, kk = i - r * GK;
				float v = 0.0f;
				if (n0 + r < N && k0 + kk < K) v = pv_units::dq_elem(W, (int64_t)e * N + n0 + r, k0 + kk);
				Bs[r * GS + kk] = __float2bfloat16_rn(a.wlo ? low_half(v) : v);
			}
		}
		__syncthreads();
		tile_mma(acc, As, Bs, warp, lane);
		__syncthreads(); /* As, Bs consumed */
	}
	tile_store(a, acc, slot, n0, warp, g, c);
}

/*
 * The same product with the loads pipelined (cuda.prefill_moe=gemm, the default, for BF16 and
 * Q8_0 experts): the synchronous loader above keeps one k-step of loads in flight per thread, a
 * block waits on each step's round trip, and the grouped GEMMs moved their weights at ~0.85 TB/s
 * (ledger: cuda-moe-ggemm-pipe). Here cp.async copies the raw bytes of the next PS - 1 k-steps
 * (A rows as bf16; weight rows as bf16, or Q8_0 quants) into a ring of shared stages without
 * holding registers; the Q8_0 scales of those steps ride in a register ring. Each step then
 * converts its Q8_0 stage into Bs through q8_to_bf16 and runs tile_mma: the same shared tiles,
 * the same MMAs in the same order, so the same bits as ggemm_kernel (test_cuda prefill compares
 * the two bitwise). Needs K % 8 == 0 (BF16) or K % 32 == 0 (Q8_0), x 16-byte aligned, ldx % 8 == 0.
 */
constexpr int PS = 4;            /* stages: 3 k-steps in flight while one is computed        */
constexpr int SCS = 64 * 2 + 16; /* Q8_0 scales: shared row stride, up to 64 blocks (K 2048) */

__device__ __forceinline__ void cp16(void* dst, const void* src, bool full)
{
	const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(full ? 16 : 0) : "memory");
}
/* the same for weight rows, asking L2 for the 256 bytes around (the row's next k-steps): a step
 * reads 16-64 bytes of each of 64 rows 1-4 KB apart, and sector-sized DRAM requests spread over
 * 64 rows kept the loader near 1.25 TB/s (ledger: cuda-moe-ggemm-pipe) */
__device__ __forceinline__ void cp16_w(void* dst, const void* src, bool full)
{
	const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(full ? 16 : 0)
	             : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait()
{
	asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

template <int WK, bool SCSH>
__global__ void __launch_bounds__(128) ggemm_pipe_kernel(const __grid_constant__ ggemm_args a)
{
	pv_grid_sync(); /* before any global memory access (PDL) */
	constexpr int BST = WK == W_Q8_0 ? GN * GK : GN * GS * 2; /* bytes of one weight stage */
	__shared__ __align__(16) bf16 As[PS][GM * GS];
	__shared__ __align__(16) unsigned char Bw[PS][BST];
	__shared__ __align__(16) bf16 Bq[WK == W_Q8_0 ? GN * GS : 8]; /* Q8_0: the step's weights as bf16 */
	__shared__ __align__(16) unsigned char Sc[WK == W_Q8_0 ? GN * SCS : 16]; /* Q8_0: the rows' scales */
	__shared__ int slot[GM];
	const int tile = blockIdx.y;
	if (tile >= *a.ntiles) return; /* the whole block */
	const int2 tl = a.tiles[tile];
	const int e = tl.x, s0 = tl.y, cnt = min(GM, a.off[e + 1] - s0);
	const int n0 = blockIdx.x * GN;
	const pv_units::Planes W = a.w[blockIdx.z];
	const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, c = lane & 3;
	const int N = a.N, K = a.K, nk = (K + GK - 1) / GK;
	if (tid < GM) slot[tid] = tid < cnt ? a.perm[s0 + tid] : -1;
	/* A: this thread's two 16-byte pieces a step, rows tid / 4 and 32 + tid / 4, columns cc .. cc + 7 */
	const int ar = tid >> 2, cc = (tid & 3) * 8;
	const bf16* asrc[2];
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const int r = ar + 32 * i;
		const int q = r < cnt ? a.perm[s0 + r] : -1;
		asrc[i] = q >= 0 ? a.x + (size_t)(a.by_slot ? q : q / a.k) * a.ldx + cc : nullptr;
	}
	/* B: Q8_0, row tid / 2, bytes 16 (tid % 2) .. of the step's 32; BF16, rows tid / 4 and 32 + tid / 4, columns cc .. */
	const int qr = tid >> 1, hh = tid & 1;
	const unsigned char* wsrc[2];
	const unsigned char* dsrc = nullptr;
	if (WK == W_Q8_0) {
		const int64_t row = (int64_t)e * N + n0 + qr;
		wsrc[0] = n0 + qr < N ? W.p0 + (size_t)row * W.s0 + 16 * hh : nullptr;
		wsrc[1] = nullptr;
		dsrc = n0 + qr < N ? W.p1 + (size_t)row * W.s1 : nullptr;
	} else {
#pragma unroll
		for (int i = 0; i < 2; i++) {
			const int r = ar + 32 * i;
			wsrc[i] = n0 + r < N ? W.p0 + (size_t)((int64_t)e * N + n0 + r) * W.s0 + (size_t)cc * 2 : nullptr;
		}
	}
	/* Q8_0 (SCSH): the 64 rows' scales of every step copied once, with step 0 (a 2-byte load per row
	 * and step kept the L1 busy, ledger: cuda-moe-ggemm-pipe); else loaded per step into dr */
	constexpr bool scsh = WK == W_Q8_0 && SCSH; /* sc_shared() holds for both matrices */
	if (scsh)
		for (int p = tid; p < GN * (nk / 8); p += 128) {
			const int r = p / (nk / 8), q = p % (nk / 8);
			const bool in = n0 + r < N;
			cp16(Sc + r * SCS + 16 * q, in ? W.p1 + (size_t)((int64_t)e * N + n0 + r) * W.s1 + 16 * q : W.p1, in);
		}
	/* step j's copies into stage j % PS (empty groups past the end keep the group count uniform);
	 * no copy for rows past the tile's slots: only their own (unstored) outputs read them */
	auto issue = [&](int j) {
		if (j < nk) {
			const int k0 = j * GK, st = j % PS;
			const bool kin = k0 + cc < K; /* K % 8 == 0: a piece is whole or past the end */
#pragma unroll
			for (int i = 0; i < 2; i++)
				if (asrc[i]) cp16(&As[st][(ar + 32 * i) * GS + cc], kin ? asrc[i] + k0 : a.x, kin);
			if (WK == W_Q8_0) {
				cp16_w(&Bw[st][qr * GK + 16 * hh], wsrc[0] ? wsrc[0] + k0 : W.p0, wsrc[0] != nullptr);
			} else {
#pragma unroll
				for (int i = 0; i < 2; i++)
					cp16_w(&Bw[st][((ar + 32 * i) * GS + cc) * 2], wsrc[i] ? wsrc[i] + (size_t)k0 * 2 : W.p0,
					       wsrc[i] && kin);
			}
		}
		cp_commit();
	};
	/* Q8_0: step j's scale in dr[j % PS], loaded with the step's copies and used PS - 1 steps later */
	float dr[PS];
#pragma unroll
	for (int i = 0; i < PS; i++) dr[i] = 0.0f;
	auto scale = [&](int j) {
		return WK == W_Q8_0 && !scsh && dsrc && j < nk ? pv_units::f16f(pv_units::u16at(dsrc + (size_t)j * 2)) : 0.0f;
	};
	/* a warp whose 16 rows hold no slot (slots fill rows 0 .. cnt - 1) skips its MMAs: at 512 rows a
	 * tile holds ~16 of 64 (8 of 256 experts a row); a row's sums never depend on the other rows */
	const bool busy = 16 * warp < cnt;
	float acc[8][4];
#pragma unroll
	for (int i = 0; i < 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll
	for (int j = 0; j < PS - 1; j++) {
		issue(j);
		dr[j] = scale(j);
	}
	for (int j0 = 0; j0 < nk; j0 += PS) {
#pragma unroll
		for (int u = 0; u < PS; u++) {
			const int j = j0 + u;
			if (j < nk) {
				cp_wait<PS - 2>(); /* this thread's copies of step j have landed */
				__syncthreads();   /* everyone's; and step j - 1's tiles are consumed */
				issue(j + PS - 1);
				if (WK == W_Q8_0) {
					dr[(u + PS - 1) % PS] = scale(j + PS - 1);
					const uint4 qv = *reinterpret_cast<const uint4*>(&Bw[u][qr * GK + 16 * hh]);
					const float d = scsh ? pv_units::f16f(pv_units::u16at(Sc + qr * SCS + 2 * j)) : dr[u];
					q8_to_bf16(qv, d, a.wlo, Bq + qr * GS + 16 * hh);
					__syncthreads();
					if (busy) tile_mma(acc, As[u], Bq, warp, lane);
				} else if (busy) {
					tile_mma(acc, As[u], reinterpret_cast<const bf16*>(Bw[u]), warp, lane);
				}
			}
		}
	}
	cp_wait<0>();
	__syncthreads(); /* slot */
	tile_store(a, acc, slot, n0, warp, g, c);
}

/* Fallback for MoE FFNs: the decode's kernels (router GEMV, routing, gathered expert GEMVs, the
 * shared expert, combine) over 16-row groups of xn (f32), into delta. */
int moe_layer(struct pv_prefill_ctx* k, const struct dlayer* L, int T)
{
	struct pv_prefill* p = k->p;
	struct dsession* v = k->d;
	const struct pv_config* c = k->c;
	const int H = c->hidden, E = c->n_experts, kk = c->n_experts_used, Ie = c->moe_inter, Is = c->shared_inter;
	char* err = k->err;
	const size_t errlen = k->errlen;
	for (int g0 = 0; g0 < T; g0 += PV_CUDA_ROWS) {
		const int n = T - g0 < PV_CUDA_ROWS ? T - g0 : PV_CUDA_ROWS;
		const float* xg = p->xn + (size_t)g0 * H;
		struct moe_args a;
		pv_moe_args_layer(&a, c, L, n);
		a.logits = v->rlog;
		a.idx = v->top_idx;
		a.w = v->top_w;
		a.eo = v->eo;
		a.sh = v->sho;
		a.xn = xg;
		a.out = p->delta + (size_t)g0 * H;
		struct gemv_out r[1] = { { &L->router, v->rlog, E, NULL } };
		if (pv_cuda_gemv(v->st, &v->tu, r, 1, xg, NULL, H, PV_X_PLAIN, n, &p->nl, err, errlen)) return -1;
		if (pv_cuda_moe_route(v->st, &v->tu, &a, err, errlen)) return -1;
		p->nl++;
		struct gemv_gather ga = { v->top_idx, n * kk, kk, E, 0 };
		struct gemv_out gu[2] = { { &L->ex_gate, v->eg, Ie, NULL }, { &L->ex_up, v->eu, Ie, NULL } };
		if (pv_cuda_gemv_gather(v->st, &v->tu, gu, 2, xg, NULL, H, PV_X_PLAIN, 1, &ga, &p->nl, err, errlen)) return -1;
		if (pv_cuda_swiglu(v->st, &v->tu, v->eg, v->eu, Ie, Ie, n * kk, err, errlen)) return -1;
		p->nl++;
		ga.x_by_slot = 1;
		struct gemv_out dn[1] = { { &L->ex_down, v->eo, H, NULL } };
		if (pv_cuda_gemv_gather(v->st, &v->tu, dn, 1, v->eg, NULL, Ie, PV_X_PLAIN, 1, &ga, &p->nl, err, errlen))
			return -1;
		if (a.shared) {
			struct gemv_out sgu[2] = { { &L->sh_gate, v->shg, Is, NULL }, { &L->sh_up, v->shu, Is, NULL } };
			if (pv_cuda_gemv(v->st, &v->tu, sgu, 2, xg, NULL, H, PV_X_PLAIN, n, &p->nl, err, errlen)) return -1;
			if (pv_cuda_swiglu(v->st, &v->tu, v->shg, v->shu, Is, Is, n, err, errlen)) return -1;
			p->nl++;
			struct gemv_out sd[1] = { { &L->sh_down, v->sho, H, NULL } };
			if (pv_cuda_gemv(v->st, &v->tu, sd, 1, v->shg, NULL, Is, PV_X_PLAIN, n, &p->nl, err, errlen)) return -1;
		}
		if (pv_cuda_moe_combine(v->st, &v->tu, &a, err, errlen)) return -1;
		p->nl++;
	}
	return 0;
}

int wkind(const struct dmat* w, int K)
{
	if (w->type == PV_BF16 && K % 8 == 0) return W_BF16;
	if (w->type == PV_Q8_0 && K % 32 == 0) return W_Q8_0;
	return W_GENERIC;
}

/* Q8_0 scale planes ggemm_pipe_kernel<W_Q8_0, true> can copy whole: rows of at most 64 blocks, a
 * multiple of 8, 16-byte aligned */
bool sc_shared(const pv_units::Planes& w, int K)
{
	const int nb = K / 32;
	return nb <= SCS / 2 - 8 && nb % 8 == 0 && w.s1 % 16 == 0 && (uintptr_t)w.p1 % 16 == 0;
}

/* One grouped GEMM launch: the pipelined loader where its conditions hold and cuda.prefill_moe
 * is gemm (0), else the synchronous one (cuda.prefill_moe=sync; the same bits). */
int ggemm(struct pv_prefill_ctx* k, const char* what, const ggemm_args& g, dim3 grid)
{
	char* err = k->err;
	const size_t errlen = k->errlen;
	const int pipe = k->d->tu.prefill_moe == 0 && (g.wkind == W_Q8_0 || g.wkind == W_BF16) &&
	                 (uintptr_t)g.x % 16 == 0 && g.ldx % 8 == 0;
	if (pipe && g.wkind == W_Q8_0 && sc_shared(g.w[0], g.K) && sc_shared(g.w[1], g.K))
		PV_LAUNCH(what, &k->d->tu, err, errlen, (ggemm_pipe_kernel<W_Q8_0, true>), grid, dim3(128), 0, k->d->st, g);
	else if (pipe && g.wkind == W_Q8_0)
		PV_LAUNCH(what, &k->d->tu, err, errlen, (ggemm_pipe_kernel<W_Q8_0, false>), grid, dim3(128), 0, k->d->st, g);
	else if (pipe)
		PV_LAUNCH(what, &k->d->tu, err, errlen, (ggemm_pipe_kernel<W_BF16, false>), grid, dim3(128), 0, k->d->st, g);
	else
		PV_LAUNCH(what, &k->d->tu, err, errlen, ggemm_kernel, grid, dim3(128), 0, k->d->st, g);
	return 0;
}

/* MoE FFN over T rows without a host sync: the router as the decode's GEMV (f32, 16-row groups
 * in one launch, so the expert choice is the decode's for the same input), routing (moe.cu) for the T rows, the
 * slots sorted by expert, grouped GEMMs for the experts' gate/up and down (outputs per slot in
 * slot order), the shared expert as GEMMs, the decode's combine (per row, slots in order). */
int moe_layer_gemm(struct pv_prefill_ctx* k, const struct dlayer* L, int T)
{
	struct pv_prefill* p = k->p;
	struct dsession* v = k->d;
	const struct pv_config* c = k->c;
	const int H = c->hidden, E = c->n_experts, kk = c->n_experts_used, Ie = c->moe_inter, Is = c->shared_inter;
	const int nslots = T * kk;
	char* err = k->err;
	const size_t errlen = k->errlen;
	cudaStream_t st = v->st;
	{ /* all T rows in one launch of 16-row groups, not a launch per group (ledger:
	   * cuda-moe-router-one-launch) */
		struct gemv_out r[1] = { { &L->router, p->rlog, E, NULL } };
		if (pv_cuda_gemv(st, &v->tu, r, 1, p->xn, NULL, H, PV_X_PLAIN, T, &p->nl, err, errlen)) return -1;
	}
	struct moe_args a;
	pv_moe_args_layer(&a, c, L, T);
	a.logits = p->rlog;
	a.idx = p->tidx;
	a.w = p->tw;
	a.eo = p->eo;
	a.sh = p->so;
	a.xn = p->xn;
	a.out = p->delta;
	if (pv_cuda_moe_route(st, &v->tu, &a, err, errlen)) return -1;
	p->nl++;
	const size_t sort_smem = sizeof(int) * (size_t)(SORT_CHUNK + 4 * E + 1);
	if (sort_smem > 48 * 1024) /* 2,047 experts; Qwen's have up to 512 */
		return pv_errf(err, errlen, "CUDA backend: the MoE prompt path sorts at most 2047 experts (model: %d)", E);
	PV_LAUNCH("moe sort", &k->d->tu, err, errlen, moe_sort_kernel, dim3(1), dim3(SORT_THREADS), sort_smem, st, p->tidx, nslots, E, p->eoff, p->perm, p->tiles, p->ntiles);
	p->nl++;
	const unsigned max_tiles = (unsigned)((nslots + GM - 1) / GM + E);
	{
		ggemm_args g;
		memset(&g, 0, sizeof g);
		g.x = p->xb;
		g.ldx = p->ldh;
		g.by_slot = 0;
		g.k = kk;
		g.perm = p->perm;
		g.off = p->eoff;
		g.ntiles = p->ntiles;
		g.tiles = p->tiles;
		g.w[0] = pv_prefill_planes(&L->ex_gate);
		g.w[1] = pv_prefill_planes(&L->ex_up);
		g.y[0] = p->eg;
		g.y[1] = p->eu;
		g.ldy = Ie;
		g.N = Ie;
		g.K = H;
		g.wkind = wkind(&L->ex_gate, H);
		if (wkind(&L->ex_up, H) != g.wkind) g.wkind = W_GENERIC;
		if (ggemm(k, "moe gate/up", g, dim3((unsigned)((Ie + GN - 1) / GN), max_tiles, 2))) return -1;
		p->nl++;
		if (pv_prefill_lo(p, p->xb)) { /* precise mode: += the low halves' products */
			g.x = pv_prefill_lo(p, p->xb);
			g.accumulate = 1;
			if (ggemm(k, "moe gate/up lo", g, dim3((unsigned)((Ie + GN - 1) / GN), max_tiles, 2))) return -1;
			p->nl++;
			if (g.wkind != W_BF16) {
				g.x = p->xb;
				g.wlo = 1;
				if (ggemm(k, "moe gate/up w lo", g, dim3((unsigned)((Ie + GN - 1) / GN), max_tiles, 2))) return -1;
				p->nl++;
			}
		}
	}
	if (pv_prefill_swiglu(k, p->eg, p->eu, Ie, p->ehb, p->ldie, Ie, nslots)) return -1;
	{
		ggemm_args g;
		memset(&g, 0, sizeof g);
		g.x = p->ehb;
		g.ldx = p->ldie;
		g.by_slot = 1;
		g.k = kk;
		g.perm = p->perm;
		g.off = p->eoff;
		g.ntiles = p->ntiles;
		g.tiles = p->tiles;
		g.w[0] = pv_prefill_planes(&L->ex_down);
		g.w[1] = g.w[0];
		g.y[0] = p->eo;
		g.y[1] = p->eo;
		g.ldy = H;
		g.N = H;
		g.K = Ie;
		g.wkind = wkind(&L->ex_down, Ie);
		if (ggemm(k, "moe down", g, dim3((unsigned)((H + GN - 1) / GN), max_tiles, 1))) return -1;
		p->nl++;
		if (pv_prefill_lo(p, p->ehb)) {
			g.x = pv_prefill_lo(p, p->ehb);
			g.accumulate = 1;
			if (ggemm(k, "moe down lo", g, dim3((unsigned)((H + GN - 1) / GN), max_tiles, 1))) return -1;
			p->nl++;
			if (g.wkind != W_BF16) {
				g.x = p->ehb;
				g.wlo = 1;
				if (ggemm(k, "moe down w lo", g, dim3((unsigned)((H + GN - 1) / GN), max_tiles, 1))) return -1;
				p->nl++;
			}
		}
	}
	if (a.shared) {
		if (pv_prefill_gemm(k, &L->sh_gate, p->xb, p->ldh, p->sg, Is, T) ||
		    pv_prefill_gemm(k, &L->sh_up, p->xb, p->ldh, p->su, Is, T))
			return -1;
		if (pv_prefill_swiglu(k, p->sg, p->su, Is, p->shb, p->ldis, Is, T)) return -1;
		if (pv_prefill_gemm(k, &L->sh_down, p->shb, p->ldis, p->so, H, T)) return -1;
	}
	if (pv_cuda_moe_combine(st, &v->tu, &a, err, errlen)) return -1;
	p->nl++;
	return 0;
}

} // namespace

int pv_prefill_moe_layer(struct pv_prefill_ctx* k, const struct dlayer* L, int T)
{
	return k->p->moe_gemm ? moe_layer_gemm(k, L, T) : moe_layer(k, L, T);
}
