/* watch: a teacher's read-only view of a learner's terminal (terminal.h).
 *
 * A WebSocket whose AUTH carries a watch token (wire/token.h) does not
 * open a shell: it follows the newest terminal this serve has open in
 * that sandbox (a learner's browser terminal). It gets first the last
 * SERVE_WATCH_REPLAY bytes that terminal printed (a ring kept here per
 * learner session, so the watcher sees the current screen; when the ring
 * has wrapped, from the first line start in its first 4 KiB, so that no
 * cut escape sequence or character begins the replay, else from its first
 * whole character), then every byte the learner's
 * terminal gets, as the learner gets it. The supervisor's ttyreplay
 * filter is above serve in the layers and not needed here: a watcher's
 * answers to a terminal's queries are never sent to the shell.
 *
 * A watcher never writes to the terminal: its binary messages (keys) and
 * text messages (resize) are answered with an ERROR saying so and
 * dropped. It never slows the learner: its queue is its own, and past
 * SERVE_WATCH_QUEUE (1.5 MiB: a watcher that does not read, or reads
 * 512 KiB slower than the learner's browser) it is dropped and the watcher
 * closed (1013, try again). The learner's page is told how many
 * watch ({"watchers": N}, wire/termws.h) whenever that changes; when the
 * learner's terminal ends, its watchers get its {"exit": N} and then
 * {"error": "the learner's terminal ended"} and are closed (1000). */
#include "serve/serve_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"

/* A wrapped ring's replay starts after its first newline when there is one
 * within this many bytes (else at its first character: one long line). */
#define REPLAY_RESYNC 4096

unsigned serve_watchers(const sg_serve *srv, const char *sandbox)
{
    unsigned n = 0;
    for (const tsess *t = srv->sessions; t; t = t->next)
        n += t->watcher && !t->closing && (!sandbox || strcmp(t->sandbox, sandbox) == 0);
    return n;
}

static unsigned watchers_of(const tsess *learner)
{
    unsigned n = 0;
    for (const tsess *w = learner->srv->sessions; w; w = w->next)
        n += w->watched == learner && !w->closing;
    return n;
}

static void tell_count(tsess *learner)
{
    if (learner->closing)
        return;
    serve_queue_msg(learner, &(sg_termws_msg){.kind = SG_TERMWS_WATCHERS, .watchers = watchers_of(learner)});
}

/* The newest terminal of sandbox whose shell runs. */
static tsess *terminal_of(sg_serve *srv, const char *sandbox)
{
    for (tsess *t = srv->sessions; t; t = t->next) /* newest first */
        if (!t->watcher && t->shell_on && !t->closing && t->wsi && strcmp(t->sandbox, sandbox) == 0)
            return t;
    return NULL;
}

static void drop_queue(tsess *w)
{
    for (outmsg *m = w->qhead, *n; m; m = n) {
        n = m->next;
        free(m);
    }
    w->qhead = w->qtail = NULL;
    w->qbytes = 0;
}

/* Queues for watcher w within its bound; past it w is closed. */
static void watch_send(tsess *w, bool text, const void *p, size_t len)
{
    if (w->closing)
        return;
    if (w->qbytes + len > SERVE_WATCH_QUEUE || serve_queue_out(w, text, p, len) < 0) {
        tsess *learner = w->watched;
        drop_queue(w);
        serve_refuse_code(w, SERVE_CLOSE_TRY_AGAIN,
                          "this watcher fell behind the terminal (1.5 MiB unread): open the watch again");
        if (learner)
            sg_log(SG_LOG_INFO, "watch of sandbox %s by token %s closed: it fell behind", w->sandbox, w->token_id);
    }
}

/* The ring's content, oldest first, from a line start when it wrapped. */
static void replay(tsess *learner, tsess *w)
{
    const char *r = learner->ring;
    if (!r)
        return;
    size_t len = learner->ring_full ? SERVE_WATCH_REPLAY : learner->ring_pos;
    char *buf = malloc(len ? len : 1);
    if (!buf)
        return;
    size_t old = learner->ring_full ? SERVE_WATCH_REPLAY - learner->ring_pos : 0;
    memcpy(buf, r + learner->ring_pos, old);
    memcpy(buf + old, r, learner->ring_pos);
    size_t skip = 0;
    if (learner->ring_full) { /* from a line start, or at least a character's */
        const char *nl = memchr(buf, '\n', len < REPLAY_RESYNC ? len : REPLAY_RESYNC);
        skip = nl ? (size_t)(nl - buf) + 1 : 0;
        while (!nl && skip < len && ((unsigned char)buf[skip] & 0xC0) == 0x80)
            skip++;
    }
    if (len > skip)
        watch_send(w, false, buf + skip, len - skip);
    free(buf);
}

void serve_watch_open(tsess *t, const char *sandbox, const char *token_id)
{
    sg_serve *srv = t->srv;
    snprintf(t->sandbox, sizeof t->sandbox, "%s", sandbox);
    snprintf(t->token_id, sizeof t->token_id, "%s", token_id);
    t->watcher = true;
    t->authed = true;
    uv_timer_stop(&t->timer);
    if (serve_watchers(srv, sandbox) > SG_SERVE_WATCHERS_PER_SANDBOX) /* t counts itself */
        return serve_refuse_code(t, SERVE_CLOSE_TRY_AGAIN,
                                 "too many watchers of this sandbox (4 at most): try again later");
    tsess *learner = terminal_of(srv, sandbox);
    if (!learner)
        return serve_refuse_code(t, SERVE_CLOSE_TRY_AGAIN,
                                 "no terminal is open in this sandbox on this host: nothing to watch yet");
    t->watched = learner;
    sg_log(SG_LOG_INFO, "watch of sandbox %s by token %s from %s", sandbox, token_id, t->addr);
    replay(learner, t);
    tell_count(learner);
}

void serve_watch_output(tsess *t, const void *p, size_t len)
{
    const char *b = p;
    if (!t->ring && !(t->ring = malloc(SERVE_WATCH_REPLAY)))
        return;
    size_t keep = len > SERVE_WATCH_REPLAY ? SERVE_WATCH_REPLAY : len;
    b += len - keep;
    if (len > keep)
        t->ring_full = true;
    while (keep) {
        size_t n = SERVE_WATCH_REPLAY - t->ring_pos < keep ? SERVE_WATCH_REPLAY - t->ring_pos : keep;
        memcpy(t->ring + t->ring_pos, b, n);
        t->ring_pos += n;
        b += n;
        keep -= n;
        if (t->ring_pos == SERVE_WATCH_REPLAY) {
            t->ring_pos = 0;
            t->ring_full = true;
        }
    }
    for (tsess *w = t->srv->sessions, *next; w; w = next) {
        next = w->next;
        if (w->watched == t)
            watch_send(w, false, p, len);
    }
}

void serve_watch_input(tsess *t, bool text)
{
    static const char keys[] = "watching is read-only: your input was not sent to the terminal";
    static const char resize[] = "watching is read-only: a watcher cannot resize the terminal";
    size_t len = 0;
    char *s = sg_termws_encode(&(sg_termws_msg){.kind = SG_TERMWS_ERROR, .error = (char *)(text ? resize : keys)},
                               &len);
    if (s)
        watch_send(t, true, s, len);
    free(s);
}

void serve_watch_end(tsess *t)
{
    if (t->watcher) {
        tsess *learner = t->watched;
        t->watched = NULL;
        if (learner)
            tell_count(learner);
        return;
    }
    /* An ERROR as well as the close's reason: a browser may not show the
     * reason (nor the code) of a close. */
    for (tsess *w = t->srv->sessions; w; w = w->next)
        if (w->watched == t) {
            w->watched = NULL;
            serve_refuse_code(w, LWS_CLOSE_STATUS_NORMAL, "the learner's terminal ended");
        }
}

void serve_watch_exit(tsess *t, int code)
{
    size_t len = 0;
    char *s = sg_termws_encode(&(sg_termws_msg){.kind = SG_TERMWS_EXIT, .exit_code = code}, &len);
    for (tsess *w = t->srv->sessions, *next; s && w; w = next) {
        next = w->next;
        if (w->watched == t)
            watch_send(w, true, s, len);
    }
    free(s);
}
