/*
 * nbody.c: a gravitational N-body simulation (one heavy central body and a
 * ring of light ones, all pairs interacting) integrated with a kick-drift-kick
 * leapfrog scheme, in double precision.
 *
 * Usage: nbody.wasm [STEPS]   (STEPS defaults to 80000)
 *
 * Prints the total energy before and after, the relative drift, and a
 * checksum of the final positions. The starting state comes from a fixed
 * seed, so the output is deterministic.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline))

#define NBODIES 40
#define G 1.0
#define SOFTENING 1e-3
#define DT 1e-3

struct body {
    double x, y, z;
    double vx, vy, vz;
    double ax, ay, az;
    double mass;
};

static struct body bodies[NBODIES];

static uint64_t seed = 0x2545f4914f6cdd1dULL;

/* A uniform double in [0, 1) from a 64-bit LCG (top 53 bits). */
static double uniform(void) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(seed >> 11) * (1.0 / 9007199254740992.0);
}

/* Central mass at the origin, the others on roughly circular orbits around it. */
static NOINLINE void init_bodies(void) {
    const double two_pi = 6.283185307179586;
    bodies[0] = (struct body){0};
    bodies[0].mass = 1000.0;
    for (int i = 1; i < NBODIES; i++) {
        struct body *b = &bodies[i];
        double r = 1.0 + 9.0 * uniform();
        double phi = two_pi * uniform();
        double tilt = 0.05 * (uniform() - 0.5);
        b->x = r * cos(phi);
        b->y = r * sin(phi);
        b->z = r * tilt;
        double v = sqrt(G * bodies[0].mass / r);
        b->vx = -v * sin(phi);
        b->vy = v * cos(phi);
        b->vz = 0.0;
        b->mass = 0.01 + 0.09 * uniform();
        b->ax = b->ay = b->az = 0.0;
    }
}

/* Shifts all velocities so that the total momentum is zero. */
static NOINLINE void offset_momentum(void) {
    double px = 0, py = 0, pz = 0, m = 0;
    for (int i = 0; i < NBODIES; i++) {
        px += bodies[i].vx * bodies[i].mass;
        py += bodies[i].vy * bodies[i].mass;
        pz += bodies[i].vz * bodies[i].mass;
        m += bodies[i].mass;
    }
    for (int i = 0; i < NBODIES; i++) {
        bodies[i].vx -= px / m;
        bodies[i].vy -= py / m;
        bodies[i].vz -= pz / m;
    }
}

/* Gravitational accelerations of all bodies, every pair once. */
static NOINLINE void compute_accelerations(void) {
    for (int i = 0; i < NBODIES; i++) bodies[i].ax = bodies[i].ay = bodies[i].az = 0.0;
    for (int i = 0; i < NBODIES; i++) {
        struct body *a = &bodies[i];
        for (int j = i + 1; j < NBODIES; j++) {
            struct body *b = &bodies[j];
            double dx = b->x - a->x, dy = b->y - a->y, dz = b->z - a->z;
            double d2 = dx * dx + dy * dy + dz * dz + SOFTENING * SOFTENING;
            double inv = 1.0 / (d2 * sqrt(d2));
            double sa = G * b->mass * inv, sb = G * a->mass * inv;
            a->ax += dx * sa; a->ay += dy * sa; a->az += dz * sa;
            b->ax -= dx * sb; b->ay -= dy * sb; b->az -= dz * sb;
        }
    }
}

static NOINLINE void kick(double h) {
    for (int i = 0; i < NBODIES; i++) {
        bodies[i].vx += h * bodies[i].ax;
        bodies[i].vy += h * bodies[i].ay;
        bodies[i].vz += h * bodies[i].az;
    }
}

static NOINLINE void drift(double h) {
    for (int i = 0; i < NBODIES; i++) {
        bodies[i].x += h * bodies[i].vx;
        bodies[i].y += h * bodies[i].vy;
        bodies[i].z += h * bodies[i].vz;
    }
}

/* One leapfrog step: half kick, drift, new forces, half kick. */
static NOINLINE void advance(void) {
    kick(0.5 * DT);
    drift(DT);
    compute_accelerations();
    kick(0.5 * DT);
}

/* Kinetic plus potential energy (with the same softening as the forces). */
static NOINLINE double energy(void) {
    double e = 0.0;
    for (int i = 0; i < NBODIES; i++) {
        const struct body *a = &bodies[i];
        e += 0.5 * a->mass * (a->vx * a->vx + a->vy * a->vy + a->vz * a->vz);
        for (int j = i + 1; j < NBODIES; j++) {
            const struct body *b = &bodies[j];
            double dx = b->x - a->x, dy = b->y - a->y, dz = b->z - a->z;
            e -= G * a->mass * b->mass / sqrt(dx * dx + dy * dy + dz * dz + SOFTENING * SOFTENING);
        }
    }
    return e;
}

/* FNV-1a over the positions rounded to 1e-6, to keep it insensitive to
 * last-bit differences in printing. */
static NOINLINE uint64_t position_checksum(void) {
    uint64_t h = 14695981039346656037ULL;
    for (int i = 0; i < NBODIES; i++) {
        double c[3] = {bodies[i].x, bodies[i].y, bodies[i].z};
        for (int k = 0; k < 3; k++) {
            int64_t q = (int64_t)llround(c[k] * 1e6);
            for (int byte = 0; byte < 8; byte++) {
                h ^= (uint64_t)(q >> (8 * byte)) & 0xff;
                h *= 1099511628211ULL;
            }
        }
    }
    return h;
}

int main(int argc, char **argv) {
    int steps = 80000;
    if (argc > 1) {
        steps = atoi(argv[1]);
        if (steps < 0) {
            fprintf(stderr, "usage: nbody [STEPS]\n");
            return 2;
        }
    }
    init_bodies();
    offset_momentum();
    compute_accelerations();
    double e0 = energy();
    printf("bodies=%d steps=%d dt=%g\n", NBODIES, steps, DT);
    printf("energy before: %.9f\n", e0);
    for (int s = 0; s < steps; s++) advance();
    double e1 = energy();
    printf("energy after:  %.9f\n", e1);
    printf("relative drift: %.3e\n", fabs((e1 - e0) / e0));
    printf("body 1 at (%.6f, %.6f, %.6f)\n", bodies[1].x, bodies[1].y, bodies[1].z);
    printf("checksum=%016llx\n", (unsigned long long)position_checksum());
    return 0;
}
