/* tests/fuzz.h - random mutations of a text for the loaders' never-crash tests. */
#ifndef UN_TEST_FUZZ_H
#define UN_TEST_FUZZ_H

#include <string.h>

#include "pcg/un.h"

/* Applies 1-4 random edits to buf[0, n) (cap bytes available): a byte replaced by a JSON-ish
 * character, a byte deleted, a run of up to 16 bytes duplicated, or the text cut. Returns the new
 * length. */
__attribute__((unused)) static size_t fuzz_mutate(un_rng *rng, char *buf, size_t n, size_t cap) {
    static const char alphabet[] = "{}[]\":,0123456789-abcdefghijklmnopqrstuvwxyz_() .!<>=%*+/";
    int edits = 1 + (int)un_rng_below(rng, 4);
    for (int e = 0; e < edits && n > 1; e++) {
        size_t at = un_rng_below(rng, n);
        switch (un_rng_below(rng, 4)) {
        case 0:
            buf[at] = alphabet[un_rng_below(rng, sizeof alphabet - 1)];
            break;
        case 1:
            memmove(buf + at, buf + at + 1, n - at - 1);
            n--;
            break;
        case 2: {
            size_t k = 1 + un_rng_below(rng, 16);
            if (at + k > n)
                k = n - at;
            if (n + k <= cap) {
                memmove(buf + at + k, buf + at, n - at);
                n += k;
            }
            break;
        }
        default:
            n = at + 1;
            break;
        }
    }
    return n;
}

#endif
