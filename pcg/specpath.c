/* specpath.c - finding the operator specs (specpath.h). */
#include "pcg/specpath.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* path itself, or path/ops.json when path is a directory. */
static bool resolve(const char *path, char *out, size_t n) {
    struct stat sb;
    bool dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    int len = snprintf(out, n, dir ? "%s/ops.json" : "%s", path);
    return len >= 0 && (size_t)len < n;
}

static bool exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

un_status un_specpath_find(un_ctx *ctx, const char *arg, char *out, size_t n) {
    const char *env = getenv("UNITY_SPECS");
    const char *given = arg ? arg : env && *env ? env : NULL;
    if (given) {
        if (!resolve(given, out, n))
            return un_ctx_error(ctx, UN_ERR_INVALID, "%s: path too long", given);
        return UN_OK;
    }
    if (exists("specs/ops.json")) {
        snprintf(out, n, "specs/ops.json");
        return UN_OK;
    }
    char exe[4096], installed[4200] = "(the program's path is unknown)";
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        snprintf(installed, sizeof installed, "%s/../share/unity/specs/ops.json", exe);
        if (exists(installed)) {
            int w = snprintf(out, n, "%s", installed);
            if (w < 0 || (size_t)w >= n)
                return un_ctx_error(ctx, UN_ERR_INVALID, "%s: path too long", installed);
            return UN_OK;
        }
    }
    return un_ctx_error(
        ctx, UN_ERR_IO,
        "operator specs not found: no --spec, no $UNITY_SPECS, no ./specs/ops.json, "
        "no %s",
        installed);
}
