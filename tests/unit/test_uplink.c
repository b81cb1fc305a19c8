/* test_uplink: spool + uplink against the REAL ingest ($SANDGLASSD_BIN
 * ingest on an ephemeral port, real SQLite): 10k events delivered exactly
 * once in order; the ingest SIGKILLed mid-stream and restarted; the ingest
 * down at the start; a bad token refused with 401 and retried. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "sgt_fork.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libwebsockets.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#include "base/cleanup.h"
#include "base/json.h"
#include "base/util.h"
#include "delivery/spool.h"
#include "delivery/uplink.h"
#include "wire/event.h"

#define LEARNER "alice"
#define TASK "t1"
#define SANDBOX "0123456789ab"

static const char *bin;
static char tmpdir[256];

typedef struct fixture {
    uv_loop_t loop;
    uv_timer_t tick;          /* wakes uv_run(ONCE) so run_until can poll */
    pid_t ingest;
    int port;
    char db[300], secret[300], spooldir[300];
    char *token;
    sg_spool *sp;
    sg_uplink *up;
    int refused_401, refused_close, connected_events;
    int disconnects;          /* DISCONNECTED events, each with its retry_ms */
    uint32_t retry_ms[32];    /* the first ones' delays */
    char last_error[300], last_refusal[300];
} fixture;

static fixture F;

static double now_s(void)
{
    return (double)sg_now_mono_ns() / 1e9;
}

/* Starts the ingest on port (0: any); returns its port. */
static int start_ingest(int port)
{
    for (int attempt = 0; attempt < 50; attempt++) {
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        pid_t pid = sgt_fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            dup2(p[1], 1);
            char listen[64], store[320];
            snprintf(listen, sizeof listen, "127.0.0.1:%d", port);
            snprintf(store, sizeof store, "sqlite:%s", F.db);
            execl(bin, bin, "ingest", "--listen", listen, "--store", store, "--secret", F.secret,
                  (char *)NULL);
            _exit(127);
        }
        close(p[1]);
        char buf[256] = {0};
        size_t have = 0;
        int got = -1;
        struct pollfd pfd = {p[0], POLLIN, 0};
        while (have + 1 < sizeof buf && poll(&pfd, 1, 10000) > 0) {
            ssize_t r = read(p[0], buf + have, sizeof buf - 1 - have);
            if (r <= 0)
                break;
            have += (size_t)r;
            char *l = strstr(buf, "listening on ws://127.0.0.1:");
            if (l && strchr(l, '\n')) {
                got = atoi(l + strlen("listening on ws://127.0.0.1:"));
                break;
            }
        }
        close(p[0]);
        if (got > 0) {
            F.ingest = pid;
            return got;
        }
        /* the port may still be held by the one we just killed */
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        usleep(100000);
    }
    fail_msg("ingest did not start (%s)", bin);
    return -1;
}

static void kill_ingest(void)
{
    if (F.ingest > 0) {
        kill(F.ingest, SIGKILL);
        waitpid(F.ingest, NULL, 0);
        F.ingest = 0;
    }
}

static char *make_token(const char *sandbox)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s token --learner %s --task %s --sandbox %s --secret %s", bin,
             LEARNER, TASK, sandbox, F.secret);
    FILE *f = popen(cmd, "r");
    assert_non_null(f);
    char buf[4096] = {0};
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    assert_int_equal(pclose(f), 0);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    assert_true(n > 0);
    return strdup(buf);
}

static void on_event(void *ud, const sg_uplink_event *ev)
{
    fixture *f = ud;
    if (ev->type == SG_UPLINK_REFUSED && ev->code == 401)
        f->refused_401++;
    else if (ev->type == SG_UPLINK_REFUSED) {
        f->refused_close++;
        snprintf(f->last_refusal, sizeof f->last_refusal, "%s", ev->reason);
    } else if (ev->type == SG_UPLINK_ERROR)
        snprintf(f->last_error, sizeof f->last_error, "%s", ev->reason);
    else if (ev->type == SG_UPLINK_CONNECTED)
        f->connected_events++;
    else if (ev->type == SG_UPLINK_DISCONNECTED) {
        if (f->disconnects < (int)(sizeof f->retry_ms / sizeof f->retry_ms[0]))
            f->retry_ms[f->disconnects] = ev->retry_ms;
        f->disconnects++;
    }
    if (getenv("SG_TEST_VERBOSE"))
        fprintf(stderr, "# uplink event %d code %d: %s (retry %u ms)\n", ev->type, ev->code,
                ev->reason, ev->retry_ms);
}

static void on_tick(uv_timer_t *t)
{
    (void)t;
}

static int setup(void **state)
{
    memset(&F, 0, sizeof F);
    snprintf(tmpdir, sizeof tmpdir, "/tmp/sg-test-uplink-XXXXXX");
    if (!mkdtemp(tmpdir))
        return -1;
    snprintf(F.db, sizeof F.db, "%s/e.db", tmpdir);
    snprintf(F.secret, sizeof F.secret, "%s/secret", tmpdir);
    snprintf(F.spooldir, sizeof F.spooldir, "%s/spool", tmpdir);
    if (uv_loop_init(&F.loop) != 0)
        return -1;
    uv_timer_init(&F.loop, &F.tick);
    uv_timer_start(&F.tick, on_tick, 10, 10);
    return 0;
}

static int teardown(void **state)
{
    sg_uplink_free(F.up);
    F.up = NULL;
    sg_spool_close(F.sp);
    F.sp = NULL;
    kill_ingest();
    uv_timer_stop(&F.tick);
    uv_close((uv_handle_t *)&F.tick, NULL);
    uv_run(&F.loop, UV_RUN_DEFAULT);
    /* every handle of the uplink (and lws) is closed */
    int rc = uv_loop_close(&F.loop);
    free(F.token);
    sg_err err;
    sg_rm_rf(tmpdir, &err);
    if (rc != 0)
        fprintf(stderr, "# uv_loop_close: %s\n", uv_strerror(rc));
    return rc == 0 ? 0 : -1;
}

static void open_uplink(const char *token)
{
    sg_err err;
    F.sp = F.sp ? F.sp : sg_spool_open(F.spooldir, NULL, &err);
    assert_non_null(F.sp);
    char url[64];
    snprintf(url, sizeof url, "ws://127.0.0.1:%d", F.port);
    F.up = sg_uplink_new(&F.loop, url, token, F.sp, NULL, &err);
    if (!F.up)
        fail_msg("%s", err.msg);
    sg_uplink_set_event_cb(F.up, on_event, &F);
}

/* Appends n events (as the supervisor does: frame, spool, group commit,
 * notify) in batches. */
static void produce(int64_t n, int batch)
{
    sg_err err;
    for (int64_t i = 0; i < n; i++) {
        int64_t seq = sg_spool_next_seq(F.sp);
        json_t *payload = json_pack("{s:s, s:I}", "stream", "stdout", "n", (json_int_t)seq);
        sg_autojson json_t *fr = sg_event_frame(seq, SG_EV_STDOUT, payload, NULL, SANDBOX);
        assert_non_null(fr);
        sg_autofree char *s = sg_json_dump(fr);
        assert_int_equal(sg_spool_append(F.sp, seq, s, strlen(s), &err), 0);
        if ((i + 1) % batch == 0 || i + 1 == n) {
            assert_int_equal(sg_spool_sync(F.sp, &err), 0);
            sg_uplink_notify(F.up);
            uv_run(&F.loop, UV_RUN_NOWAIT);
        }
    }
}

typedef bool (*pred_fn)(void);

static bool run_until(pred_fn p, double timeout_s)
{
    double end = now_s() + timeout_s;
    while (!p() && now_s() < end)
        uv_run(&F.loop, UV_RUN_ONCE);
    return p();
}

static bool four_disconnects(void)
{
    return F.disconnects >= 4;
}

static bool reconnected(void)
{
    sg_uplink_stats st;
    sg_uplink_get_stats(F.up, &st);
    return st.reconnects >= 1;
}

static bool one_disconnect(void)
{
    return F.disconnects >= 1;
}

static bool two_refused_closes(void)
{
    return F.refused_close >= 2;
}

static bool two_401s(void)
{
    return F.refused_401 >= 2;
}

static bool all_acked(void)
{
    return sg_spool_acked_seq(F.sp) >= sg_spool_synced_seq(F.sp) &&
           sg_spool_synced_seq(F.sp) >= 0;
}

/* The store holds seqs 0..n-1 of the stream exactly once, in seq order by
 * insertion. */
static void check_store(int64_t n)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(F.db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT seq, payload FROM sg_events WHERE learner = ?1 AND "
                                        "task = ?2 AND sandbox = ?3 ORDER BY id",
                                        -1, &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_text(st, 1, LEARNER, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, TASK, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, SANDBOX, -1, SQLITE_STATIC);
    int64_t want = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t seq = sqlite3_column_int64(st, 0);
        if (seq != want)
            fail_msg("store row %" PRId64 " has seq %" PRId64, want, seq);
        char expect[64];
        snprintf(expect, sizeof expect, "\"n\":%" PRId64, seq);
        assert_non_null(strstr((const char *)sqlite3_column_text(st, 1), expect));
        want++;
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    assert_int_equal(want, n);
}

static bool up_ready(void);

static bool up_down(void)
{
    return !up_ready();
}

static void test_stream_10k(void **state)
{
    F.port = start_ingest(0);
    F.token = make_token(SANDBOX);
    open_uplink(F.token);
    double t0 = now_s();
    produce(10000, 100);
    sg_err err;
    assert_int_equal(sg_uplink_drain(F.up, 30000, &err), 0);
    double dt = now_s() - t0;
    printf("# uplink: 10000 events (batches of 100) acked in %.3f s: %.0f events/s\n", dt,
           10000 / dt);
    sg_uplink_stats st;
    sg_uplink_get_stats(F.up, &st);
    assert_true(st.connected);
    assert_int_equal(st.acked_seq, 9999);
    assert_int_equal(st.connects, 1);
    assert_int_equal(st.reconnects, 0);
    assert_int_equal(sg_spool_pending(F.sp), 0);
    /* fully acked segments are gone */
    sg_spool_stats ss;
    sg_spool_get_stats(F.sp, &ss);
    assert_int_equal(ss.segments, 1);
    check_store(10000);

    /* More later: the same connection carries on. */
    produce(50, 7);
    assert_int_equal(sg_uplink_drain(F.up, 10000, &err), 0);
    check_store(10050);

    /* An ingest restart with nothing in flight: the reconnect resends
     * nothing (the spool's ack is the ingest's). */
    kill_ingest();
    assert_true(run_until(up_down, 10));
    F.port = start_ingest(F.port);
    assert_true(run_until(up_ready, 30));
    produce(1, 1);
    assert_int_equal(sg_uplink_drain(F.up, 10000, &err), 0);
    sg_uplink_get_stats(F.up, &st);
    assert_int_equal(st.resent_at_connect, 0);
    assert_int_equal(st.connects, 2);
    check_store(10051);
}

static void test_ingest_killed(void **state)
{
    F.port = start_ingest(0);
    F.token = make_token(SANDBOX);
    open_uplink(F.token);
    produce(4000, 50);
    /* SIGKILL the ingest while frames are in flight. */
    assert_int_equal(kill(F.ingest, SIGKILL), 0);
    waitpid(F.ingest, NULL, 0);
    F.ingest = 0;
    int64_t acked_at_kill = sg_spool_acked_seq(F.sp);
    /* The learner keeps working while the ingest is down. */
    produce(3000, 50);
    /* the uplink has seen the ingest go before it comes back */
    assert_true(run_until(one_disconnect, 30));
    F.port = start_ingest(F.port);
    assert_true(run_until(all_acked, 30));
    sg_uplink_stats st;
    sg_uplink_get_stats(F.up, &st);
    assert_true(st.reconnects >= 1);
    assert_true(st.connects >= 2);
    assert_int_equal(st.acked_seq, 6999);
    printf("# killed at ack %" PRId64 ", %" PRIu64 " frames sent for 7000 events, %" PRIu64
           " of them resent past the spool's ack at a reconnect\n",
           acked_at_kill, st.sent, st.resent_at_connect);
    check_store(7000);
}

static void test_ingest_down_at_start(void **state)
{
    /* Learn a free port, then keep it free. */
    F.port = start_ingest(0);
    F.token = make_token(SANDBOX);
    kill_ingest();
    open_uplink(F.token);
    produce(500, 10);
    /* Counted by events, not in a window of time: four failed attempts. */
    assert_true(run_until(four_disconnects, 60));
    sg_uplink_stats st;
    sg_uplink_get_stats(F.up, &st);
    assert_false(st.connected);
    /* Backoff, no busy loop: every attempt after the first was one
     * scheduled by a failure, each failure's delay within full jitter's
     * bound for its attempt (0.25 s doubling, at most 8 s). */
    assert_true(st.reconnects >= 3);
    assert_true(st.reconnects <= (uint64_t)F.disconnects);
    uint64_t waited = 0;
    for (int i = 0; i < F.disconnects && i < (int)(sizeof F.retry_ms / sizeof F.retry_ms[0]); i++) {
        uint32_t cap = (uint32_t)SG_UPLINK_BACKOFF_MIN_MS << (i < 5 ? i : 5);
        assert_true(F.retry_ms[i] <= (cap < SG_UPLINK_BACKOFF_MAX_MS ? cap : SG_UPLINK_BACKOFF_MAX_MS));
        waited += F.retry_ms[i];
    }
    /* and they wait: four delays of 0 ms from full jitter over 0.25, 0.5,
     * 1 and 2 s have odds below 1e-10 */
    assert_true(waited > 0);
    assert_int_equal(sg_spool_acked_seq(F.sp), -1);
    assert_int_equal(sg_spool_pending(F.sp), 500);

    F.port = start_ingest(F.port);
    double t0 = now_s();
    /* no drain: the backoff timer alone must bring it back (cap 8 s) */
    assert_true(run_until(all_acked, 20));
    printf("# delivered %.2f s after the ingest came back\n", now_s() - t0);
    check_store(500);
}

/* A peer that stops answering (the ingest SIGSTOPped: TCP stays up, no
 * acks): the ack watchdog drops the connection, the uplink retries, and
 * once the ingest runs again everything arrives exactly once. */
static void test_stalled_ingest(void **state)
{
    F.port = start_ingest(0);
    F.token = make_token(SANDBOX);
    open_uplink(F.token);
    sg_uplink_set_ack_timeout(F.up, 1000);
    produce(100, 10);
    sg_err err;
    assert_int_equal(sg_uplink_drain(F.up, 10000, &err), 0);
    assert_int_equal(kill(F.ingest, SIGSTOP), 0);
    produce(200, 10);
    /* the watchdog's drop is seen as the retry it causes */
    assert_true(run_until(reconnected, 60));
    sg_uplink_stats st;
    sg_uplink_get_stats(F.up, &st);
    assert_false(st.connected);
    assert_int_equal(sg_spool_acked_seq(F.sp), 99);
    assert_int_equal(kill(F.ingest, SIGCONT), 0);
    assert_true(run_until(all_acked, 30));
    check_store(300);
}

static void test_refused(void **state)
{
    F.port = start_ingest(0);
    open_uplink("not-a-valid-token");
    produce(10, 10);
    assert_true(run_until(two_401s, 60)); /* refused with 401, and retried */
    sg_uplink_stats st;
    sg_uplink_get_stats(F.up, &st);
    assert_false(st.connected);
    assert_true(st.refusals >= 2);
    assert_int_equal(sg_spool_acked_seq(F.sp), -1);
    sg_err err;
    assert_int_equal(sg_uplink_drain(F.up, 200, &err), -1);
    assert_int_equal(err.code, ETIMEDOUT);
    sg_uplink_free(F.up);
    F.up = NULL;

    /* A token for another sandbox: frames carry our sandbox_id, so the
     * ingest closes with 1008 (policy) — reported and retried. */
    F.token = make_token("otherbox0000");
    open_uplink(F.token);
    sg_uplink_notify(F.up);
    assert_true(run_until(two_refused_closes, 60));
    sg_uplink_get_stats(F.up, &st);
    assert_int_equal(st.last_close_code, 1008);
    check_store(0);
}

/* Appends n events with this text, synced, without telling the uplink. */
static void append_quietly(sg_spool *sp, int64_t n, const char *text)
{
    sg_err err;
    for (int64_t i = 0; i < n; i++) {
        int64_t seq = sg_spool_next_seq(sp);
        sg_autojson json_t *fr = sg_event_frame(seq, SG_EV_STDOUT, json_pack("{s:s, s:s}", "stream", "stdout",
                                                                          "data", text), NULL, SANDBOX);
        sg_autofree char *s = sg_json_dump(fr);
        assert_int_equal(sg_spool_append(sp, seq, s, strlen(s), &err), 0);
    }
    assert_int_equal(sg_spool_sync(sp, &err), 0);
}

static bool up_ready(void)
{
    sg_uplink_stats st;
    sg_uplink_get_stats(F.up, &st);
    return st.connected;
}

/* The stream-token seq race: another holder of the token stores seqs 0..2
 * while our frames 0..4 wait. Ours is refused (1008, other content at seq
 * 0) on every resend: the uplink stops after SG_UPLINK_SEQ_REFUSALS_MAX
 * refusals, drain says why, and the spool keeps all five — the ingest's
 * ack (2, the forgeries) never trims our frames unsent. */
static void test_seq_race(void **state)
{
    F.port = start_ingest(0);
    F.token = make_token(SANDBOX);
    open_uplink(F.token);
    assert_true(run_until(up_ready, 10));
    append_quietly(F.sp, 5, "ours");
    /* the other holder, on its own spool and uplink */
    char dir2[320];
    snprintf(dir2, sizeof dir2, "%s/spool2", tmpdir);
    sg_err err;
    sg_spool *sp2 = sg_spool_open(dir2, NULL, &err);
    assert_non_null(sp2);
    char url[64];
    snprintf(url, sizeof url, "ws://127.0.0.1:%d", F.port);
    /* on a loop of its own: ours does not run meanwhile */
    uv_loop_t loop2;
    uv_loop_init(&loop2);
    sg_uplink *evil = sg_uplink_new(&loop2, url, F.token, sp2, NULL, &err);
    assert_non_null(evil);
    append_quietly(sp2, 3, "forged");
    assert_int_equal(sg_uplink_drain(evil, 10000, &err), 0);
    sg_uplink_free(evil);
    uv_run(&loop2, UV_RUN_DEFAULT);
    assert_int_equal(uv_loop_close(&loop2), 0);
    sg_spool_close(sp2);
    sg_uplink_notify(F.up);
    int r = sg_uplink_drain(F.up, 60000, &err);
    sg_uplink_stats st;
    sg_uplink_get_stats(F.up, &st);
    if (getenv("SG_TEST_VERBOSE"))
        fprintf(stderr, "# race: drain %d, refusals %llu: %s\n", r, (unsigned long long)st.refusals,
                err.msg);
    assert_int_equal(r, -1);
    assert_int_equal(err.code, EPROTO);
    assert_non_null(strstr(err.msg, "refused seq 0 "));
    assert_non_null(strstr(err.msg, "other content"));
    assert_int_equal(st.stuck_seq, 0);
    assert_int_equal(sg_spool_acked_seq(F.sp), -1);
    assert_int_equal(sg_spool_pending(F.sp), 5); /* kept, for an operator */
}

/* The legitimate case of an ingest ack above the spool's: the acks of our
 * own frames were lost (a supervisor killed before it persisted them; here
 * a copy of the spool taken before any send). The uplink resends every
 * frame after the spool's ack; the ingest takes the identical resends and
 * acks them: nothing is refused, nothing lost. */
static void test_lagging_ack_resends(void **state)
{
    F.port = start_ingest(0);
    F.token = make_token(SANDBOX);
    F.sp = sg_spool_open(F.spooldir, NULL, &(sg_err){0});
    assert_non_null(F.sp);
    append_quietly(F.sp, 10, "ours");
    char copy[1024];
    snprintf(copy, sizeof copy, "cp -a %s %s/spool-lagging", F.spooldir, tmpdir);
    assert_int_equal(system(copy), 0);
    open_uplink(F.token);
    sg_err err;
    assert_int_equal(sg_uplink_drain(F.up, 30000, &err), 0);
    sg_uplink_free(F.up);
    F.up = NULL;
    sg_spool_close(F.sp);
    snprintf(copy, sizeof copy, "%s/spool-lagging", tmpdir);
    F.sp = sg_spool_open(copy, NULL, &err);
    assert_non_null(F.sp);
    assert_int_equal(sg_spool_acked_seq(F.sp), -1);
    open_uplink(F.token);
    sg_uplink_notify(F.up);
    assert_int_equal(sg_uplink_drain(F.up, 30000, &err), 0);
    sg_uplink_stats st;
    sg_uplink_get_stats(F.up, &st);
    assert_int_equal(st.resent_at_connect, 10); /* the ingest had all ten */
    assert_int_equal(st.refusals, 0);
    assert_int_equal(sg_spool_acked_seq(F.sp), 9);

}

/* A frame the ingest refuses by its seq on every replay (here a gap: the
 * ingest's store was lost while our spool had trimmed what it acked): the
 * uplink stops after SG_UPLINK_SEQ_REFUSALS_MAX refusals instead of
 * sending it forever, keeps it, and drain says why at once. */
static void test_seq_refused_stops(void **state)
{
    F.port = start_ingest(0);
    F.token = make_token(SANDBOX);
    F.sp = sg_spool_open(F.spooldir, NULL, &(sg_err){0});
    assert_non_null(F.sp);
    sg_spool_set_segment_bytes(F.sp, 4096); /* small segments: acked ones are deleted */
    open_uplink(F.token);
    produce(200, 50);
    sg_err err;
    assert_int_equal(sg_uplink_drain(F.up, 30000, &err), 0);
    sg_uplink_free(F.up);
    F.up = NULL;
    append_quietly(F.sp, 3, "after the store was lost");
    kill_ingest();
    unlink(F.db);
    char wal[320];
    snprintf(wal, sizeof wal, "%s-wal", F.db);
    unlink(wal);
    snprintf(wal, sizeof wal, "%s-shm", F.db);
    unlink(wal);
    F.port = start_ingest(F.port);
    open_uplink(F.token);
    double t0 = now_s();
    int r = sg_uplink_drain(F.up, 60000, &err);
    double took = now_s() - t0;
    sg_uplink_stats st;
    sg_uplink_get_stats(F.up, &st);
    if (getenv("SG_TEST_VERBOSE"))
        fprintf(stderr, "# stops: drain %d in %.2f s: %s\n", r, took, err.msg);
    assert_int_equal(r, -1);
    assert_int_equal(err.code, EPROTO);
    assert_non_null(strstr(err.msg, "gave up: the ingest refused seq"));
    /* EPROTO, not the drain's ETIMEDOUT: it stopped, whatever the time */
    assert_true(st.stuck_seq > 0);
    assert_int_equal(F.refused_close, SG_UPLINK_SEQ_REFUSALS_MAX);
    assert_true(sg_spool_pending(F.sp) >= 3); /* kept */
}

int main(void)
{
    bin = getenv("SANDGLASSD_BIN");
    if (!bin || access(bin, X_OK) != 0) {
        printf("1..0 # SKIP SANDGLASSD_BIN not set or not executable\n");
        return 0;
    }
    signal(SIGPIPE, SIG_IGN);
    lws_set_log_level(getenv("SG_TEST_VERBOSE") ? LLL_ERR | LLL_WARN | LLL_NOTICE : LLL_ERR,
                      NULL);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_stream_10k, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ingest_killed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ingest_down_at_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stalled_ingest, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seq_race, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lagging_ack_resends, setup, teardown),
        cmocka_unit_test_setup_teardown(test_seq_refused_stops, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
