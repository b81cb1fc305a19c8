/* sv_tty: a tty exec's terminal (tty.h) wired to the exec and its caller,
 * and its shell session's record:
 *
 *  - the terminal's output is the exec's stdout (output limit, capture,
 *    caller); the caller's STDIN and WINSZ go to the terminal; each side
 *    holds the other back when it is slow;
 *  - the whole session, as the terminal carried it, goes to an asciicast
 *    v3 file, <state>/sb/<id>/casts/<exec>.cast (asciicast.h): output, the
 *    keys typed (unless "record_input": false), resizes, a marker at each
 *    command, the exit;
 *  - the shell integration's marks (marks.h) cut the session into
 *    commands (bash: a C mark each; sh: the echo of the line typed after
 *    a prompt whose B says cmdline=echo, echoline.h): each is captured as
 *    an exec is, with the capture's own exec events (command, stdout,
 *    run_result or test_result, file_diff events flushed around it),
 *    under the shell exec's id; a checkpoint is taken
 *    at a prompt, so before each command typed at it (not at every
 *    prompt mark: prompt_checkpoint). The marks come
 *    from inside the sandbox: the cast and the file diffs are the record;
 *  - detach and attach: a "detachable" exec outlives its caller (DETACH,
 *    or the connection closed); "attach" makes a new connection its caller
 *    and first replays the terminal's last SV_TTY_REPLAY_MAX bytes, so the
 *    screen is not blank until the program prints again; without the
 *    queries a full-screen program sent (ttyreplay.h): the new terminal
 *    would answer them, and its answers would be typed into the shell. */
#include "supervisor/sv_checkpoint.h"
#include "supervisor/sv_client.h"
#include "supervisor/sv_exec.h"
#include "supervisor/sv_execnotify.h"
#include "supervisor/sv_tty.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "capture/asciicast.h"
#include "capture/contents.h"
#include "capture/echoline.h"
#include "capture/marks.h"
#include "supervisor/ttyreplay.h"
#include "base/log.h"

/* What an attach replays of the terminal's recent output. */
#define SV_TTY_REPLAY_MAX (64 * 1024)
#define SHELL_CWD_MAX 4096 /* a prompt's cwd kept for sh's next command */
/* Prompts after programs ran but with nothing typed (a loop of programs
 * printing marks): one checkpoint decision a second at most. */
#define PROMPT_RAN_CKPT_NS 1000000000ull

struct sv_shell {
    sv_exec *ex;
    sg_cast cast;
    bool record_input;
    sg_marks marks;
    sg_buf out;            /* the output read, as it came, not yet in the recording */
    sg_capture_exec *cmd;  /* the command the marks say runs, when captured */
    uint64_t cmd_start_ns;
    uint32_t prompts;
    /* At the last checkpoint decision (prompt_checkpoint): the sandbox's
     * held execve calls, the typed bytes, the time */
    uint64_t execs_at_ckpt, typed_at_ckpt, ckpt_ns;
    bool decided_this_read;
    char *ring;            /* the last SV_TTY_REPLAY_MAX bytes of output, for an attach */
    size_t ring_pos;       /* where the next byte goes */
    bool ring_full;        /* it wrapped: the oldest byte is at ring_pos */
    /* sh: the command line is the echo after the prompt (echoline.h),
     * run in the last prompt's cwd; typed_at_prompt: the terminal's typed
     * bytes when the prompt came */
    sg_echoline echo;
    uint64_t typed_at_prompt;
    char prompt_cwd[SHELL_CWD_MAX + 1];
    char now[SG_CTL_NOW_MAX + 1]; /* the command the marks say runs ("": at a prompt) */
};

static void ring_add(struct sv_shell *sh, const char *b, size_t n)
{
    if (!sh->ring && !(sh->ring = malloc(SV_TTY_REPLAY_MAX)))
        return; /* no replay on attach; the session goes on */
    if (n >= SV_TTY_REPLAY_MAX) {
        memcpy(sh->ring, b + n - SV_TTY_REPLAY_MAX, SV_TTY_REPLAY_MAX);
        sh->ring_pos = 0;
        sh->ring_full = true;
        return;
    }
    size_t first = SV_TTY_REPLAY_MAX - sh->ring_pos < n ? SV_TTY_REPLAY_MAX - sh->ring_pos : n;
    memcpy(sh->ring + sh->ring_pos, b, first);
    memcpy(sh->ring, b + first, n - first);
    sh->ring_full = sh->ring_full || sh->ring_pos + n >= SV_TTY_REPLAY_MAX;
    sh->ring_pos = (sh->ring_pos + n) % SV_TTY_REPLAY_MAX;
}

/* A command's end: D's status, or none (a lost mark, the shell's end). */
static void command_end(struct sv_shell *sh, int status, const char *note)
{
    sh->now[0] = '\0';
    if (!sh->cmd)
        return;
    double wall = (double)(sg_now_mono_ns() - sh->cmd_start_ns) / 1e9;
    json_t *res = json_pack("{s:o, s:f, s:b, s:o}", "exit_code", status >= 0 ? json_integer(status) : json_null(),
                            "wall_s", wall, "timed_out", 0,
                            "signal", status > 128 && status < 128 + 65 ? json_integer(status - 128) : json_null());
    if (res && note)
        json_object_set_new(res, "note", json_string(note));
    sg_capture_exec_end(sh->cmd, res);
    json_decref(res);
    sh->cmd = NULL;
}

/* A command runs: from a C mark (bash) or the echo of its line (sh). */
static void command_begin(struct sv_shell *sh, const char *line, size_t line_len, const char *dir, size_t dir_len)
{
    sv_sup *s = sh->ex->s;
    command_end(sh, -1, "no end mark came (the shell integration was changed?)");
    char *cmd = strndup(line ? line : "", line_len);
    char *cwd = dir && dir_len ? strndup(dir, dir_len) : strdup("/workspace");
    if (cmd && cwd) {
        snprintf(sh->now, sizeof sh->now, "%.*s", (int)sg_utf8_cut(cmd, strlen(cmd), SG_CTL_NOW_MAX), cmd);
        sg_cast_marker(&sh->cast, sg_now_mono_ns(), cmd, strlen(cmd));
        if (s->cap) {
            char *argv[] = {"sh", "-c", cmd, NULL};
            /* what it changed before its mark got here is its own */
            sh->cmd = sg_capture_exec_begin_ex(s->cap, sh->ex->num, argv, cwd, NULL, false);
            sh->cmd_start_ns = sg_now_mono_ns();
        }
    }
    free(cmd);
    free(cwd);
}

/* The output so far as one "o" event: a command's marker then stands
 * right after the bytes of its mark. */
static void record_flush(struct sv_shell *sh)
{
    if (sh->out.len)
        sg_cast_output(&sh->cast, sg_now_mono_ns(), sh->out.data, sh->out.len);
    sg_buf_reset(&sh->out);
}

static void record_add(struct sv_shell *sh, const char *b, size_t n)
{
    if (sg_buf_append(&sh->out, b, n) < 0) { /* out of memory: recorded unbuffered */
        record_flush(sh);
        sg_cast_output(&sh->cast, sg_now_mono_ns(), b, n);
    }
}

/* sh: the echo after its prompt, up to the newline, is the command line;
 * one nobody typed after the prompt (typed ahead: the shell reads it
 * without a new echo) is none. The recording's marker stands right after
 * the newline. Returns the bytes taken. */
static size_t echo_line(struct sv_shell *sh, const char *b, size_t n)
{
    size_t used = sg_echoline_feed(&sh->echo, b, n);
    record_add(sh, b, used);
    if (sh->echo.state == SG_ECHOLINE_READING)
        return used;
    size_t len = 0;
    bool truncated = false;
    const char *line = sg_echoline_text(&sh->echo, &len, &truncated);
    bool typed = sh->ex->tty && sg_sup_tty_input_written(sh->ex->tty) != sh->typed_at_prompt;
    if (sh->echo.state == SG_ECHOLINE_LINE && typed) {
        record_flush(sh);
        command_begin(sh, line, len, sh->prompt_cwd, strlen(sh->prompt_cwd));
    }
    sg_echoline_stop(&sh->echo);
    return used;
}

static void on_text(struct sv_shell *sh, const char *b, size_t n)
{
    if (sh->echo.state == SG_ECHOLINE_READING) {
        size_t used = echo_line(sh, b, n);
        b += used;
        n -= used;
    }
    record_add(sh, b, n);
    if (sh->cmd && n)
        sg_capture_exec_output(sh->cmd, false, b, n);
}

/* sh's next command runs where this prompt is. */
static void prompt_mark(struct sv_shell *sh, const sg_mark *m)
{
    size_t n = m->cwd && m->cwd_len <= SHELL_CWD_MAX ? m->cwd_len : 0;
    if (n)
        memcpy(sh->prompt_cwd, m->cwd, n);
    sh->prompt_cwd[n] = '\0';
}

/* Nothing runs in the foreground at a prompt: the workspace as it is now
 * is the one the next command starts from. But any program can write a
 * prompt mark, in a loop: a mark is a hint. It leads to a checkpoint
 * decision (a workspace fingerprint, a label, maybe a trip to the worker)
 * only when input was typed since the last one, or programs ran (then
 * once a second at most, and an unchanged workspace records nothing), and
 * at most once per read of the terminal: marks alone cost their bytes. */
static void prompt_checkpoint(struct sv_shell *sh)
{
    sv_sup *s = sh->ex->s;
    char label[96];
    snprintf(label, sizeof label, "before shell command (exec %u, prompt %u)", sh->ex->num, ++sh->prompts);
    uint64_t typed = sh->ex->tty ? sg_sup_tty_input_written(sh->ex->tty) : 0, now = sg_now_mono_ns();
    bool was_typed = typed != sh->typed_at_ckpt;
    bool ran = sv_execnotify_held(s) != sh->execs_at_ckpt && now - sh->ckpt_ns >= PROMPT_RAN_CKPT_NS;
    if (s->meta.manual_checkpoints || s->ks.aborted || sh->decided_this_read || !(was_typed || ran))
        return;
    sh->decided_this_read = true;
    sh->typed_at_ckpt = typed;
    sh->execs_at_ckpt = sv_execnotify_held(s);
    sh->ckpt_ns = now;
    sv_ckpt_prompt(s, label, !was_typed);
}

static void on_mark(void *ud, const sg_mark *m)
{
    struct sv_shell *sh = ud;
    if (m->kind == SG_MARK_TEXT) {
        on_text(sh, m->text, m->text_len);
        return;
    }
    sg_echoline_stop(&sh->echo); /* a mark before the newline: no line was typed */
    record_add(sh, m->raw, m->raw_len);
    if (m->kind == SG_MARK_COMMAND)
        record_flush(sh);
    switch (m->kind) {
    case SG_MARK_TEXT:
        break;
    case SG_MARK_COMMAND:
        command_begin(sh, m->cmd, m->cmd_len, m->cwd, m->cwd_len);
        break;
    case SG_MARK_DONE:
        command_end(sh, m->status, NULL);
        break;
    case SG_MARK_PROMPT:
        command_end(sh, -1, "no end mark came (the shell integration was changed?)");
        prompt_mark(sh, m);
        prompt_checkpoint(sh);
        break;
    case SG_MARK_INPUT:
        if (m->echo_line) {
            sg_echoline_start(&sh->echo);
            sh->typed_at_prompt = sh->ex->tty ? sg_sup_tty_input_written(sh->ex->tty) : 0;
        }
        break;
    }
}

static void on_tty_output(void *ud, const char *buf, size_t len)
{
    sv_exec *ex = ud;
    size_t give = sv_exec_output_take(ex, SG_CTL_STDOUT, buf, len);
    if (ex->shell && ex->detachable)
        ring_add(ex->shell, buf, len);
    if (ex->shell) {
        ex->shell->decided_this_read = false;
        sg_marks_feed(&ex->shell->marks, buf, len, on_mark, ex->shell);
        record_flush(ex->shell);
    }
    /* Recorded first, then shown: what the learner saw is in the recording
     * even when the supervisor dies right after (test_takeover). */
    if (give && ex->cl)
        sv_client_send(ex->cl, SG_CTL_STDOUT, buf, give);
    if (ex->cl && ex->cl->qbytes > SV_CLIENT_QUEUE_MAX && ex->tty)
        sg_sup_tty_pause(ex->tty, true); /* sv_client_update_poll resumes it */
}

static void on_tty_input_room(void *ud)
{
    sv_exec *ex = ud;
    if (ex->cl)
        sv_client_update_poll(ex->cl);
}

static const sg_sup_tty_ops sv_tty_ops = {on_tty_output, on_tty_input_room};

/* The recording: the casts directory is the supervisor's (0700). */
static struct sv_shell *shell_new(sv_exec *ex, const sg_exec_req *req)
{
    struct sv_shell *sh = calloc(1, sizeof *sh);
    if (!sh)
        return NULL;
    sh->ex = ex;
    sh->record_input = !req->no_record_input;
    sh->cast.fd = -1;
    sh->typed_at_ckpt = UINT64_MAX; /* the first prompt decides, as after typing */
    sg_marks_init(&sh->marks);
    const char *term = "";
    for (char **e = req->env; e && *e; e++)
        if (strncmp(*e, "TERM=", 5) == 0)
            term = *e + 5;
    sg_autofree char *dir = sg_state_sandbox_path(ex->s->meta.id, "casts");
    sg_autofree char *path = sg_strdup_printf("%s/%u.cast", dir, ex->num);
    sg_autofree char *line = sg_exec_cmdline(req->argv);
    sg_err err = {0};
    if (dir && path && (mkdir(dir, 0700) == 0 || errno == EEXIST)) {
        if (sg_cast_open(&sh->cast, path, req->winsz.cols, req->winsz.rows, term, line, sg_now_mono_ns(), &err) < 0)
            sg_log(SG_LOG_WARN, "exec %u: no recording: %s", ex->num, err.msg);
        else { /* streamed to the ingest too (capture/contents.h), named by its exec's number */
            char session[16];
            snprintf(session, sizeof session, "%u", ex->num);
            sh->cast.stream = sg_contents_cast_new(sg_capture_spool(ex->s->cap), path, session);
        }
    }
    return sh;
}

int sv_tty_start(sv_sup *s, sv_exec *ex, const sg_exec_req *req, int *stdin_fd, sg_err *err)
{
    int tsv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, tsv) < 0)
        return sg_err_sys(err, "socketpair");
    ex->tty = sg_sup_tty_new(&s->loop, tsv[0], req->winsz, &sv_tty_ops, ex);
    ex->shell = ex->tty ? shell_new(ex, req) : NULL;
    if (!ex->shell) {
        sg_sup_tty_free(ex->tty);
        ex->tty = NULL;
        close(tsv[1]);
        return sg_err_set(err, ENOMEM, "out of memory");
    }
    close(*stdin_fd);
    *stdin_fd = tsv[1];
    return 0;
}

void sv_tty_end(sv_exec *ex)
{
    if (ex->tty)
        sg_sup_tty_drain(ex->tty);
    sg_sup_tty_free(ex->tty);
    ex->tty = NULL;
    struct sv_shell *sh = ex->shell;
    if (!sh)
        return;
    sg_marks_end(&sh->marks, on_mark, sh);
    record_flush(sh);
    command_end(sh, -1, "the shell ended before the command's end mark");
    int code = !ex->exited ? -1 : WIFEXITED(ex->status) ? WEXITSTATUS(ex->status) : 128 + WTERMSIG(ex->status);
    sg_cast_exit(&sh->cast, sg_now_mono_ns(), code);
    sg_buf_free(&sh->out);
    free(sh->ring);
    free(sh);
    ex->shell = NULL;
}

/* Ignored once the exec ended (keys typed while it went). */
void sv_tty_client_msg(sv_client *c, uint8_t type, const char *buf, size_t n)
{
    sv_exec *ex = c->ex;
    if (!ex || ex->finished || !ex->tty)
        return;
    if (type == SG_CTL_STDIN) {
        ex->s->hooks.activity(ex->s);
        if (sg_sup_tty_input(ex->tty, buf, n) < 0) {
            sv_client_error(c, "typed input overflowed the terminal's queue");
            return;
        }
        if (ex->shell && ex->shell->record_input)
            sg_cast_input(&ex->shell->cast, sg_now_mono_ns(), buf, n);
        /* Full: the caller is not read until the terminal takes some
         * (on_tty_input_room), so a paste into a program that does not
         * read waits in the caller instead of killing the terminal. */
        if (sg_sup_tty_input_full(ex->tty))
            sv_client_update_poll(c);
    } else if (n == sizeof(sg_ctl_winsz)) {
        sg_ctl_winsz ws;
        memcpy(&ws, buf, sizeof ws);
        sg_sup_tty_resize(ex->tty, ws);
        if (ex->shell)
            sg_cast_resize(&ex->shell->cast, sg_now_mono_ns(), ws.cols, ws.rows);
    }
}

void sv_tty_detach(sv_client *c, bool answer)
{
    sv_exec *ex = c->ex;
    ex->cl = NULL;
    c->ex = NULL;
    /* Nobody to be slow for now: the terminal is read again (the capture,
     * the recording and the output limit go on). */
    sg_sup_tty_pause(ex->tty, false);
    sg_log(SG_LOG_INFO, "exec %u: detached from its terminal's caller", ex->num);
    sv_sup_emit(ex->s, SG_EV_ACTIVITY, json_pack("{s:s, s:I}", "state", "detached", "exec_id", (json_int_t)ex->num));
    if (answer)
        sv_client_result(c, json_pack("{s:b, s:I}", "detached", 1, "exec", (json_int_t)ex->num));
}

/* The exec an attach names, or the one detached shell; NULL with a
 * one-line reason. */
static sv_exec *attach_target(sv_sup *s, long long want, char *why, size_t whylen)
{
    sv_exec *found = NULL, *attached = NULL;
    size_t ndetached = 0;
    char list[96] = "";
    for (size_t i = 0; i < s->exec.n; i++) {
        sv_exec *ex = s->exec.list[i];
        if (!ex->tty || !ex->detachable || ex->finished)
            continue;
        if (want && (long long)ex->num != want)
            continue;
        if (ex->cl) {
            attached = ex;
            continue;
        }
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%u", ndetached ? ", " : "", ex->num);
        ndetached++;
        found = ex;
    }
    if (ndetached == 1)
        return found;
    if (ndetached > 1)
        snprintf(why, whylen, "%zu shells run detached (execs %s): name one, e.g. --attach %u", ndetached, list,
                 found->num);
    else if (attached)
        snprintf(why, whylen, "the shell of exec %u already has a terminal attached: detach that one first "
                 "(its detach keys) or close it", attached->num);
    else if (want)
        snprintf(why, whylen, "exec %lld is not a running shell that can be attached", want);
    else
        snprintf(why, whylen, "no detached shell runs in this sandbox (start one with: sandglass shell ID)");
    return NULL;
}

/* The replay's frames, as full as SG_CTL_CHUNK allows. */
struct replay_out {
    sv_client *c;
    size_t len;
    char buf[SG_CTL_CHUNK];
};

static void replay_flush(struct replay_out *o)
{
    if (o->len)
        sv_client_send(o->c, SG_CTL_STDOUT, o->buf, o->len);
    o->len = 0;
}

static void replay_add(void *ud, const char *b, size_t n)
{
    struct replay_out *o = ud;
    while (n) {
        size_t take = sizeof o->buf - o->len < n ? sizeof o->buf - o->len : n;
        memcpy(o->buf + o->len, b, take);
        o->len += take;
        b += take;
        n -= take;
        if (o->len == sizeof o->buf)
            replay_flush(o);
    }
}

/* The replay: the ring from its oldest byte, without what would make the
 * new terminal answer as if typed (ttyreplay.h), from the first sequence
 * or line start when it wrapped. */
static void attach_replay(sv_client *c, struct sv_shell *sh)
{
    if (!sh->ring)
        return;
    sg_autofree struct replay_out *o = malloc(sizeof *o);
    if (!o)
        return; /* no replay; the session goes on */
    o->c = c;
    o->len = 0;
    sg_ttyreplay f;
    sg_ttyreplay_init(&f, sh->ring_full, replay_add, o);
    if (sh->ring_full)
        sg_ttyreplay_feed(&f, sh->ring + sh->ring_pos, SV_TTY_REPLAY_MAX - sh->ring_pos);
    sg_ttyreplay_feed(&f, sh->ring, sh->ring_pos);
    sg_ttyreplay_end(&f);
    replay_flush(o);
}

/* req was decoded (sg_ctl_decode_attach): exec 0 is "the only one". */
void sv_tty_attach(sv_sup *s, sv_client *c, const sg_ctl_attach_req *req)
{
    char why[400];
    if (s->ks.aborted) {
        snprintf(why, sizeof why, "session aborted: %s", s->ks.reason);
        sv_client_error(c, why);
        return;
    }
    sv_exec *ex = attach_target(s, req->exec, why, sizeof why);
    if (!ex) {
        sv_client_error(c, why);
        return;
    }
    ex->cl = c;
    c->ex = ex;
    ex->code_only = true; /* the attacher gets the exit code: stats were read for the first caller's wish */
    ex->detachable = req->detachable;
    sg_log(SG_LOG_INFO, "exec %u: a terminal attached", ex->num);
    s->hooks.activity(s);
    sv_sup_emit(s, SG_EV_ACTIVITY, json_pack("{s:s, s:I}", "state", "attached", "exec_id", (json_int_t)ex->num));
    attach_replay(c, ex->shell);
    sg_ctl_winsz ws = req->winsz;
    sg_sup_tty_resize(ex->tty, ws);
    sg_cast_resize(&ex->shell->cast, sg_now_mono_ns(), ws.cols, ws.rows);
}

/* ---- op handlers (sv_dispatch.c's table) ---- */

void sv_tty_op_attach(sv_sup *s, sv_client *c, sg_ctl_req *req, int fd_in)
{
    sv_tty_attach(s, c, &req->u.attach);
}

void sv_tty_catch_up(void *sup_)
{
    sv_sup *s = sup_;
    /* by index, each time against nexecs: reading runs the marks' work */
    for (size_t i = 0; i < s->exec.n; i++)
        if (s->exec.list[i]->tty)
            sg_sup_tty_catch_up(s->exec.list[i]->tty);
}

const char *sv_tty_now(const sv_exec *ex)
{
    const struct sv_shell *sh = ex->shell;
    if (!sh || sh->prompts == 0) /* no shell integration: the program itself */
        return ex->now;
    return sh->now;
}
