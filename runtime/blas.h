/* blas.h - which OpenBLAS kernel runs the runtime's matrix products, chosen once per process.
 *
 * Debian's OpenBLAS is a DYNAMIC_ARCH build: when it loads it picks one of its kernel sets
 * ("core types") from the CPU id, and on CPUs newer than the release (an Emerald Rapids Xeon for
 * 0.3.21) it falls back to the generic Prescott kernels, 4-6x slower than the AVX-512 ones the
 * CPU can run. un_blas_init() makes the choice explicit:
 *
 *   - OPENBLAS_CORETYPE set in the environment: kept as it is (some machines set it on purpose);
 *   - otherwise the first of SkylakeX (AVX-512 F/CD/BW/DQ/VL), Haswell (AVX2 + FMA), Sandybridge
 *     (AVX) that the CPU supports and that passes a self-check (sgemm and dgemm, all four
 *     transpose combinations, against a float64 triple loop) replaces OpenBLAS's own pick;
 *     scripts/bench/cpu.sh measures every candidate and shows the order is fastest first;
 *   - the kernel OpenBLAS picked itself when no candidate fits or the library is not a
 *     DYNAMIC_ARCH build (no switch possible).
 *
 * The switch goes through OpenBLAS's exported gotoblas_dynamic_quit/gotoblas_dynamic_init (the
 * same code that reads OPENBLAS_CORETYPE at load time), looked up with dlsym so that any other
 * OpenBLAS build still links. It must happen before any other thread calls BLAS: the kernels and
 * the CPU backend call un_blas_init() first, and unity-train prints un_blas_describe().
 *
 *   un_blas_init();
 *   printf("blas: %s\n", un_blas_describe());   // "OpenBLAS 0.3.21 SkylakeX (chosen: ...)"
 */
#ifndef UN_BLAS_H
#define UN_BLAS_H

#include <stdbool.h>

/* Chooses and self-checks the kernel once (thread-safe; later calls return at once). */
void un_blas_init(void);

/* ---- queries (each calls un_blas_init first) ---- */

/* OpenBLAS's name of the kernel set that runs ("SkylakeX", "Haswell", "Prescott", ...). */
const char *un_blas_kernel(void);

/* One line: library, kernel and why it runs (chosen / forced by the environment / the library's
 * own pick), and the self-check's result. Static storage. */
const char *un_blas_describe(void);

/* Whether the running kernel passed the self-check (false only when every candidate and the
 * library's own pick failed it: products are then wrong and training must not start). */
bool un_blas_ok(void);

#endif
