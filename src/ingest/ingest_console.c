/* ingest_console: the teachers' console, the files of web/console/, served by the
 * ingest at / (docs/CONSOLE.md). Only the page and its own scripts are
 * served here, without a token: they hold no learner's data. Everything
 * the page shows comes from the read endpoints, each asked with the read
 * token (Authorization: Bearer), so nothing is readable without one.
 *
 * The files are a fixed list (no path from the request reaches the file
 * system) read from the console's directory at each request: the same
 * lookup as `sandglass serve`'s web directory (base/webdir.h), its
 * console/ subdirectory. */
#include "ingest/ingest_internal.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/cleanup.h"
#include "base/util.h"
#include "base/webdir.h"

#define CONSOLE_FILE_MAX (1024 * 1024)

enum { POLICY_CONSOLE, POLICY_REPLAY, POLICY_WATCH }; /* the headers of a file (below) */

static const struct {
    const char *uri, *file, *mime;
    int policy;
} console_files[] = {
    {"/", "index.html", "text/html; charset=utf-8", false},
    {"/index.html", "index.html", "text/html; charset=utf-8", false},
    {"/console.css", "console.css", "text/css; charset=utf-8", false},
    {"/favicon.svg", "favicon.svg", "image/svg+xml", false},
    {"/console.js", "console.js", "text/javascript; charset=utf-8", false},
    {"/api.js", "api.js", "text/javascript; charset=utf-8", false},
    {"/dom.js", "dom.js", "text/javascript; charset=utf-8", false},
    {"/sessions.js", "sessions.js", "text/javascript; charset=utf-8", false},
    {"/session.js", "session.js", "text/javascript; charset=utf-8", false},
    {"/timeline.js", "timeline.js", "text/javascript; charset=utf-8", false},
    {"/replay.html", "replay.html", "text/html; charset=utf-8", POLICY_REPLAY},
    {"/replay.js", "replay.js", "text/javascript; charset=utf-8", POLICY_REPLAY},
    /* npm's asciinema-player, vendored beside the console (stage-web.py) */
    {"/vendor/asciinema-player.min.js", "../vendor/asciinema-player.min.js", "text/javascript; charset=utf-8",
     POLICY_REPLAY},
    {"/vendor/asciinema-player.css", "../vendor/asciinema-player.css", "text/css; charset=utf-8", POLICY_REPLAY},
    /* watching a learner's terminal live (ingest_watch.c), with npm's xterm.js */
    {"/watch.html", "watch.html", "text/html; charset=utf-8", POLICY_WATCH},
    {"/watch.js", "watch.js", "text/javascript; charset=utf-8", POLICY_WATCH},
    {"/vendor/xterm.js", "../vendor/xterm.js", "text/javascript; charset=utf-8", POLICY_WATCH},
    {"/vendor/xterm.css", "../vendor/xterm.css", "text/css; charset=utf-8", POLICY_WATCH},
    {"/vendor/addon-fit.js", "../vendor/addon-fit.js", "text/javascript; charset=utf-8", POLICY_WATCH},
};

/* The page runs its own scripts and styles only, talks to its own origin
 * only, is never framed (a frame laid over it could catch a token typed
 * into it), and cannot hand a string to an HTML sink at all (Trusted
 * Types with no policy: innerHTML and the like throw). Every learner's
 * byte is text (textContent); this makes a slip an error, not a hole. */
static const sg_http_header console_headers[] = {
    {"content-security-policy:",
     "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
     "base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
     "require-trusted-types-for 'script'; trusted-types 'none'"},
    {"x-frame-options:", "DENY"},
    {"referrer-policy:", "no-referrer"},
    {"cross-origin-opener-policy:", "same-origin"},
    {"cross-origin-resource-policy:", "same-origin"},
    {"cache-control:", "no-cache"},
};

/* The replay page (replay.html) runs the asciinema player: its terminal
 * is WebAssembly ('wasm-unsafe-eval' lets the page compile it, and allows
 * no JavaScript eval) and its UI is built by solid-js, which makes its
 * fixed templates with innerHTML, so this page has no Trusted Types. The
 * rest is the console's policy: its own scripts and styles only, its own
 * origin only. Learners' bytes still go in as text only (replay.js, and
 * the player's terminal, which writes text nodes). */
static const sg_http_header replay_headers[] = {
    {"content-security-policy:",
     "default-src 'none'; script-src 'self' 'wasm-unsafe-eval'; style-src 'self'; connect-src 'self'; "
     "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"},
    {"x-frame-options:", "DENY"},
    {"referrer-policy:", "no-referrer"},
    {"cross-origin-opener-policy:", "same-origin"},
    {"cross-origin-resource-policy:", "same-origin"},
    {"cache-control:", "no-cache"},
};

void ingest_console_find(sg_ingest *ing)
{
    char web[PATH_MAX], page[PATH_MAX + 32];
    sg_web_dir(web, sizeof web);
    ing->console_dir[0] = '\0';
    snprintf(page, sizeof page, "%s/console/index.html", web);
    if (access(page, R_OK) == 0 && strlen(web) + sizeof "/console" <= sizeof ing->console_dir)
        memcpy(stpcpy(ing->console_dir, web), "/console", sizeof "/console");
}

/* A console file's index for uri, or -1. */
static int console_file(const char *uri)
{
    for (size_t i = 0; i < SG_ARRAY_LEN(console_files); i++)
        if (strcmp(uri, console_files[i].uri) == 0)
            return (int)i;
    return -1;
}

bool ingest_console_is_file(const char *uri)
{
    return console_file(uri) >= 0;
}

/* The file into a buffer with LWS_PRE bytes of headroom, or NULL. */
static unsigned char *read_file(const char *path, size_t *len)
{
    sg_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > CONSOLE_FILE_MAX)
        return NULL;
    unsigned char *buf = malloc(LWS_PRE + (size_t)st.st_size + 1);
    size_t have = 0;
    while (buf && have < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + LWS_PRE + have, (size_t)st.st_size - have);
        if (r <= 0) {
            free(buf);
            return NULL;
        }
        have += (size_t)r;
    }
    *len = have;
    return buf;
}

int ingest_console_serve(sg_ingest *ing, struct lws *wsi, sg_http_req *req, const char *uri)
{
    int i = console_file(uri);
    if (i < 0 || !ing->console_dir[0])
        return sg_http_answer(wsi, req, HTTP_STATUS_NOT_FOUND,
                              ingest_error_json("the console is not installed (web/console: set "
                                                "SANDGLASS_WEB_DIR, or meson install)"));
    char path[sizeof ing->console_dir + 64];
    snprintf(path, sizeof path, "%s/%s", ing->console_dir, console_files[i].file);
    size_t len = 0;
    unsigned char *buf = read_file(path, &len);
    if (!buf)
        return sg_http_answer(wsi, req, HTTP_STATUS_NOT_FOUND, ingest_error_json("console file missing"));
    if (console_files[i].policy == POLICY_REPLAY)
        return sg_http_answer_body(wsi, req, HTTP_STATUS_OK, console_files[i].mime, buf, len, replay_headers,
                                   SG_ARRAY_LEN(replay_headers));
    if (console_files[i].policy == POLICY_WATCH) {
        /* The console's headers, with the policy naming the serves (--serve). */
        sg_http_header h[SG_ARRAY_LEN(console_headers)];
        memcpy(h, console_headers, sizeof h);
        h[0].value = ing->watch_csp;
        return sg_http_answer_body(wsi, req, HTTP_STATUS_OK, console_files[i].mime, buf, len, h, SG_ARRAY_LEN(h));
    }
    return sg_http_answer_body(wsi, req, HTTP_STATUS_OK, console_files[i].mime, buf, len, console_headers,
                               SG_ARRAY_LEN(console_headers));
}
