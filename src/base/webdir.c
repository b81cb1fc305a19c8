/* webdir: the lookup of the web pages (base/webdir.h). */
#include "base/webdir.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef SG_WEB_REL
#define SG_WEB_REL "../share/sandglass/web"
#endif
#ifndef SG_WEB_DATADIR
#define SG_WEB_DATADIR "/usr/local/share/sandglass/web"
#endif

/* dir holds the page and the npm files it loads. */
static int web_complete(const char *dir)
{
    static const char *const need[] = {"terminal.html", "vendor/xterm.js"};
    for (size_t i = 0; i < sizeof need / sizeof *need; i++) {
        char path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, need[i]) >= sizeof path || access(path, R_OK) < 0)
            return 0;
    }
    return 1;
}

void sg_web_dir(char *buf, size_t size)
{
    const char *env = getenv("SANDGLASS_WEB_DIR");
    if (env && *env) {
        snprintf(buf, size, "%s", env);
        return;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    const char *const cands[][2] = {{exe, "/" SG_WEB_REL}, {exe, "/web"}, {SG_WEB_DATADIR, ""}};
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++)
        if ((size_t)snprintf(buf, size, "%s%s", cands[i][0], cands[i][1]) < size && web_complete(buf))
            return;
    snprintf(buf, size, "%s%s", cands[0][0], cands[0][1]);
}
