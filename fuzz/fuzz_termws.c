/* libFuzzer target: the terminal WebSocket's text messages (wire/termws.h),
 * network bytes a browser sends `sandglass serve` (and serve's answers, as
 * a client reads them).
 *
 * Invariants:
 *  - a browser's message decodes (before the token: AUTH, after it:
 *    RESIZE) only when it is a JSON object of at most SG_TERMWS_TEXT_MAX
 *    bytes with exactly its fields; rows and cols are then in
 *    1..SG_TERMWS_WINSZ_MAX and the token holds no NUL;
 *  - serve's message decodes as EXIT, ERROR or WATCHERS (a count within
 *    0..SG_TERMWS_WATCHERS_MAX);
 *  - a refusal says what the message must be (serve sends it as the close
 *    reason) and hands nothing out;
 *  - round trip: what decoded encodes and decodes to the same message
 *    (either side), and frees cleanly. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/termws.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool same(const sg_termws_msg *a, const sg_termws_msg *b)
{
    return a->kind == b->kind && a->rows == b->rows && a->cols == b->cols && a->exit_code == b->exit_code &&
           a->watchers == b->watchers &&
           (!a->token) == (!b->token) && (!a->token || strcmp(a->token, b->token) == 0) &&
           (!a->error) == (!b->error) && (!a->error || strcmp(a->error, b->error) == 0);
}

static bool empty(const sg_termws_msg *m)
{
    return m->kind == SG_TERMWS_NONE && !m->token && !m->error && !m->rows && !m->cols && !m->exit_code &&
           !m->watchers;
}

static void round_trip(const sg_termws_msg *m, int side, bool authed)
{
    size_t len = 0;
    char *s = sg_termws_encode(m, &len);
    if (!s || strlen(s) != len)
        abort();
    sg_termws_msg again;
    sg_err err = {0};
    int rc = side ? sg_termws_decode_serve(s, len, &again, &err)
                  : sg_termws_decode_browser(s, len, authed, &again, &err);
    /* an AUTH whose token is long enough encodes past the bound */
    if (rc < 0 && !(len > SG_TERMWS_TEXT_MAX))
        abort();
    if (rc == 0 && !same(m, &again))
        abort();
    sg_termws_msg_free(&again);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int i = 0; i < 3; i++) {
        bool authed = i == 1;
        sg_termws_msg m;
        sg_err err = {0};
        int rc = i == 2 ? sg_termws_decode_serve((const char *)data, size, &m, &err)
                        : sg_termws_decode_browser((const char *)data, size, authed, &m, &err);
        if (rc < 0) {
            if (!empty(&m) || !err.msg[0])
                abort();
            if (i < 2 && size <= SG_TERMWS_TEXT_MAX && !strstr(err.msg, "a text message is") &&
                !strstr(err.msg, "the first message is") && !strstr(err.msg, "out of memory"))
                abort();
            continue;
        }
        if (size > SG_TERMWS_TEXT_MAX)
            abort();
        if (i < 2) {
            if (m.kind != (authed ? SG_TERMWS_RESIZE : SG_TERMWS_AUTH) || m.rows < 1 ||
                m.rows > SG_TERMWS_WINSZ_MAX || m.cols < 1 || m.cols > SG_TERMWS_WINSZ_MAX ||
                (!authed && !m.token) || (authed && m.token))
                abort();
        } else if ((m.kind != SG_TERMWS_EXIT && m.kind != SG_TERMWS_ERROR && m.kind != SG_TERMWS_WATCHERS) ||
                   m.watchers > SG_TERMWS_WATCHERS_MAX || (m.kind != SG_TERMWS_WATCHERS && m.watchers)) {
            abort();
        }
        round_trip(&m, i == 2, authed);
        sg_termws_msg_free(&m);
        if (!empty(&m))
            abort();
    }
    return 0;
}
