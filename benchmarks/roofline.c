/* Roofline: a hand-fused kernel of the balanced L = 2 l2-SAM update (THEORY section 4).
 *
 * State: u [d][B] (batch last), w^(1) = w^(2) = u, one data point x = mu, y = +1.
 * One step, per grid point b:
 *   N = sqrt(2 sum_k mu_k^2 u_k^2),  u~_j = u_j - rho mu_j u_j / N,
 *   z~ = sum_k mu_k u~_k^2,  u_j <- u_j + eta sigmoid(-z~) mu_j u~_j,  tau += eta sigmoid(-z~).
 * The grid is cut into tiles of TILE points that stay in L1 for all steps; OpenMP
 * spreads tiles over cores. Built at bench time with gcc -O3 -march=native -fopenmp.
 * REAL is float, or double with -DREAL=double -DREAL_IS_DOUBLE=1.
 */
#include <math.h>
#include <stddef.h>

#ifndef REAL
#define REAL float
#endif
#if REAL_IS_DOUBLE
#define EXP exp
#define SQRT sqrt
#else
#define EXP expf
#define SQRT sqrtf
#endif
#ifndef TILE
#define TILE 256
#endif
#define DMAX 64

void run(int d, long B, long steps, const REAL *mu, const REAL *rho, const REAL *eta,
         REAL *u, REAL *tau) {
    long ntiles = (B + TILE - 1) / TILE;
#pragma omp parallel for schedule(static)
    for (long t = 0; t < ntiles; t++) {
        long b0 = t * TILE, n = (B - b0 < TILE) ? B - b0 : TILE;
        REAL U[DMAX][TILE], N2[TILE], Z[TILE], TAU[TILE], R[TILE], E[TILE];
        for (int j = 0; j < d; j++)
            for (long i = 0; i < n; i++) U[j][i] = u[j * B + b0 + i];
        for (long i = 0; i < n; i++) {
            TAU[i] = 0; R[i] = rho[b0 + i]; E[i] = eta[b0 + i];
        }
        for (long s = 0; s < steps; s++) {
            for (long i = 0; i < n; i++) N2[i] = 0, Z[i] = 0;
            for (int j = 0; j < d; j++) {
                REAL m2 = 2 * mu[j] * mu[j];
#pragma omp simd
                for (long i = 0; i < n; i++) N2[i] += m2 * U[j][i] * U[j][i];
            }
#pragma omp simd
            for (long i = 0; i < n; i++) N2[i] = R[i] / SQRT(N2[i]);  /* rho / N */
            for (int j = 0; j < d; j++) {
                REAL m = mu[j];
#pragma omp simd
                for (long i = 0; i < n; i++) {
                    REAL ut = U[j][i] - N2[i] * m * U[j][i];
                    Z[i] += m * ut * ut;
                }
            }
#pragma omp simd
            for (long i = 0; i < n; i++) {
                Z[i] = E[i] / (1 + EXP(Z[i]));  /* eta sigmoid(-z~) */
                TAU[i] += Z[i];
            }
            for (int j = 0; j < d; j++) {
                REAL m = mu[j];
#pragma omp simd
                for (long i = 0; i < n; i++) {
                    REAL ut = U[j][i] - N2[i] * m * U[j][i];
                    U[j][i] += Z[i] * m * ut;
                }
            }
        }
        for (int j = 0; j < d; j++)
            for (long i = 0; i < n; i++) u[j * B + b0 + i] = U[j][i];
        for (long i = 0; i < n; i++) tau[b0 + i] = TAU[i];
    }
}
