/* cli.h - what the programs' argument parsing shares (each *_main.c): exit statuses and numbers
 * checked for syntax, overflow and range, with one error line that names the flag and the value.
 *
 *   int64_t n;
 *   if (!un_cli_int("unity-pcg", "--degree", v, 1, 65536, &n))
 *       return UN_EXIT_USAGE;
 */
#ifndef UN_CLI_H
#define UN_CLI_H

#include <stdbool.h>
#include <stdint.h>

/* Exit statuses of every program (README.md): 1 for bad input (a file, a database, a model, a
 * plan: its contents or its absence), 2 for a usage error (an unknown flag or command, a missing
 * argument, a flag value of the wrong form or out of range). */
enum { UN_EXIT_OK = 0, UN_EXIT_INPUT = 1, UN_EXIT_USAGE = 2 };

/* The sections every program's --help ends with, man-style: EXIT STATUS, ENVIRONMENT, FILES. */
const char *un_cli_help_footer(void);

/* Parses v, the value of flag, as a decimal integer in [lo, hi]: optional '-' then digits only,
 * no overflow. Else prints `PROG: FLAG: 'V' is not an integer in [LO, HI]` to stderr and returns
 * false (*out untouched). */
bool un_cli_int(const char *prog, const char *flag, const char *v, int64_t lo, int64_t hi,
                int64_t *out);

/* The same for any 64-bit unsigned value (a seed): digits only, at most 2^64 - 1. */
bool un_cli_u64(const char *prog, const char *flag, const char *v, uint64_t *out);

#endif
