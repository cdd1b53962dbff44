/*
 * matrix.c: dense linear algebra in double precision: matrix multiply,
 * LU decomposition with partial pivoting, a triangular solve and a residual
 * check, over matrices from a fixed seed.
 *
 * Usage: matrix.wasm [N]   (N defaults to 640, at most 1024)
 *
 * Steps: A, B random; C = A * B; factor C = P L U; solve C x = b for a b
 * built from a known x; print log|det C|, the residual and error norms and a
 * checksum of C. Output is deterministic.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOINLINE __attribute__((noinline))

#define MAX_N 1024

static double *A, *B, *C, *LU;
static int *perm;
static double *xtrue, *rhs, *x;

static uint64_t seed = 0x853c49e6748fea9bULL;

static double uniform(void) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(seed >> 11) * (1.0 / 9007199254740992.0);
}

/* Entries in [-1, 1), plus `diag` on the diagonal. */
static NOINLINE void fill_random(double *m, int n, double diag) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) m[i * n + j] = 2.0 * uniform() - 1.0 + (i == j ? diag : 0.0);
}

/* c = a * b, all n x n row-major; i-k-j order so the inner loop is a stride-1 axpy. */
static NOINLINE void matmul(const double *a, const double *b, double *c, int n) {
    memset(c, 0, sizeof(double) * (size_t)n * (size_t)n);
    for (int i = 0; i < n; i++) {
        double *ci = c + (size_t)i * n;
        for (int k = 0; k < n; k++) {
            double aik = a[(size_t)i * n + k];
            const double *bk = b + (size_t)k * n;
            for (int j = 0; j < n; j++) ci[j] += aik * bk[j];
        }
    }
}

/* In-place LU with partial pivoting: m becomes L (unit, below the diagonal)
 * and U; p records the row order. Returns the sign of the permutation, or 0
 * if the matrix is singular. */
static NOINLINE int lu_decompose(double *m, int *p, int n) {
    int sign = 1;
    for (int i = 0; i < n; i++) p[i] = i;
    for (int k = 0; k < n; k++) {
        int piv = k;
        double best = fabs(m[(size_t)k * n + k]);
        for (int i = k + 1; i < n; i++) {
            double v = fabs(m[(size_t)i * n + k]);
            if (v > best) { best = v; piv = i; }
        }
        if (best == 0.0) return 0;
        if (piv != k) {
            for (int j = 0; j < n; j++) {
                double t = m[(size_t)k * n + j];
                m[(size_t)k * n + j] = m[(size_t)piv * n + j];
                m[(size_t)piv * n + j] = t;
            }
            int t = p[k]; p[k] = p[piv]; p[piv] = t;
            sign = -sign;
        }
        double inv = 1.0 / m[(size_t)k * n + k];
        for (int i = k + 1; i < n; i++) {
            double *row = m + (size_t)i * n;
            double f = row[k] * inv;
            row[k] = f;
            const double *prow = m + (size_t)k * n;
            for (int j = k + 1; j < n; j++) row[j] -= f * prow[j];
        }
    }
    return sign;
}

/* Solves (P L U) x = b using the factors from lu_decompose. */
static NOINLINE void lu_solve(const double *m, const int *p, int n, const double *b, double *out) {
    for (int i = 0; i < n; i++) {
        double s = b[p[i]];
        for (int j = 0; j < i; j++) s -= m[(size_t)i * n + j] * out[j];
        out[i] = s;
    }
    for (int i = n - 1; i >= 0; i--) {
        double s = out[i];
        for (int j = i + 1; j < n; j++) s -= m[(size_t)i * n + j] * out[j];
        out[i] = s / m[(size_t)i * n + i];
    }
}

/* out = m * v */
static NOINLINE void matvec(const double *m, int n, const double *v, double *out) {
    for (int i = 0; i < n; i++) {
        double s = 0.0;
        for (int j = 0; j < n; j++) s += m[(size_t)i * n + j] * v[j];
        out[i] = s;
    }
}

static NOINLINE double max_abs_diff(const double *a, const double *b, int n) {
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (d > worst) worst = d;
    }
    return worst;
}

static NOINLINE uint64_t checksum(const double *m, size_t count) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < count; i++) {
        int64_t q = (int64_t)llround(m[i] * 1e6);
        h ^= (uint64_t)q;
        h *= 1099511628211ULL;
    }
    return h;
}

static void *xalloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) {
        fprintf(stderr, "matrix: out of memory\n");
        exit(2);
    }
    return p;
}

int main(int argc, char **argv) {
    int n = 640;
    if (argc > 1) {
        n = atoi(argv[1]);
        if (n < 1 || n > MAX_N) {
            fprintf(stderr, "usage: matrix [N], 1 <= N <= %d\n", MAX_N);
            return 2;
        }
    }
    size_t nn = (size_t)n * (size_t)n;
    A = xalloc(nn * sizeof *A);
    B = xalloc(nn * sizeof *B);
    C = xalloc(nn * sizeof *C);
    LU = xalloc(nn * sizeof *LU);
    perm = xalloc((size_t)n * sizeof *perm);
    xtrue = xalloc((size_t)n * sizeof *xtrue);
    rhs = xalloc((size_t)n * sizeof *rhs);
    x = xalloc((size_t)n * sizeof *x);

    fill_random(A, n, 4.0);
    fill_random(B, n, 4.0);
    matmul(A, B, C, n);
    printf("n=%d checksum(C)=%016llx\n", n, (unsigned long long)checksum(C, nn));

    memcpy(LU, C, nn * sizeof *C);
    int sign = lu_decompose(LU, perm, n);
    if (sign == 0) {
        printf("singular\n");
        return 1;
    }
    double logdet = 0.0;
    int neg = sign < 0;
    for (int i = 0; i < n; i++) {
        double d = LU[(size_t)i * n + i];
        if (d < 0) neg = !neg;
        logdet += log(fabs(d));
    }
    printf("log|det C|=%.6f sign=%c\n", logdet, neg ? '-' : '+');

    for (int i = 0; i < n; i++) xtrue[i] = (double)(i % 7) - 3.0;
    matvec(C, n, xtrue, rhs);
    lu_solve(LU, perm, n, rhs, x);
    double err = max_abs_diff(x, xtrue, n);
    matvec(C, n, x, xtrue); /* reuse as C*x */
    double res = max_abs_diff(xtrue, rhs, n);
    printf("solve: max error %s, max residual %s\n", err < 1e-8 ? "< 1e-8" : "LARGE",
           res < 1e-8 ? "< 1e-8" : "LARGE");
    printf("checksum(x)=%016llx\n", (unsigned long long)checksum(x, (size_t)n));
    return err < 1e-8 && res < 1e-8 ? 0 : 1;
}
