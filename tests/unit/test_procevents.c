/* procevents against the real kernel connector (root): a forked "init"
 * stands for a sandbox's init; its descendants are the tracked set. The
 * test process and its children share the host's pid namespace, so the
 * namespace check passes and pids are the host's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <errno.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "base/bounds.h"
#include "base/util.h"
#include "capture/procevents.h"

typedef struct fx {
    uv_loop_t loop;
    sg_procevents *p;
    json_t *evs; /* [[kind, payload], ...] */
    pid_t init;
    int go[2];  /* init reads one byte, then runs its script */
    int rep[2]; /* init writes its child's pid, then its wait status */
} fx;

static void collect(void *ud, sg_event_kind kind, json_t *payload)
{
    fx *f = ud;
    json_array_append_new(f->evs, json_pack("[s, o]", sg_event_kind_name((int)kind), payload));
}

/* The "init": waits for a byte on go, runs sh -c script as its child,
 * reaps it and waits to be killed. */
static pid_t start_init(fx *f, const char *script, int fd_up, int fd_in)
{
    /* pid 1 of its own pid namespace, like a sandbox's init */
    pid_t pid = (pid_t)syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, NULL, NULL, NULL, NULL);
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test leaves nothing */
        char b;
        if (read(f->go[0], &b, 1) != 1)
            _exit(1);
        pid_t c = fork();
        if (c == 0) {
            if ((fd_up >= 0 && dup2(fd_up, 7) < 0) || (fd_in >= 0 && dup2(fd_in, 8) < 0))
                _exit(126);
            execl("/bin/sh", "sh", "-c", script, (char *)NULL);
            _exit(127);
        }
        int st = 0;
        if (write(f->rep[1], &c, sizeof c) != sizeof c)
            _exit(1);
        waitpid(c, &st, 0);
        if (write(f->rep[1], &st, sizeof st) != sizeof st)
            _exit(1);
        pause();
        _exit(0);
    }
    close(f->go[0]);
    close(f->rep[1]);
    return pid;
}

static int setup(void **state)
{
    alarm(120); /* a test that waits forever fails */
    fx *f = calloc(1, sizeof *f);
    uv_loop_init(&f->loop);
    f->evs = json_array();
    assert_int_equal(pipe(f->go), 0);
    assert_int_equal(pipe(f->rep), 0);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fx *f = *state;
    if (f->init > 0) {
        kill(f->init, SIGKILL);
        waitpid(f->init, NULL, 0);
    }
    close(f->go[1]);
    close(f->rep[0]);
    sg_procevents_close(f->p);
    uv_run(&f->loop, UV_RUN_DEFAULT);
    sg_procevents_free(f->p);
    uv_loop_close(&f->loop);
    json_decref(f->evs);
    free(f);
    return 0;
}

static json_t *find(fx *f, const char *kind, const char *argv0, const char *argv2)
{
    size_t i;
    json_t *e;
    json_array_foreach(f->evs, i, e) {
        json_t *p = json_array_get(e, 1), *av = json_object_get(p, "argv");
        if (strcmp(json_string_value(json_array_get(e, 0)), kind) != 0)
            continue;
        if (!argv0)
            return p;
        if (json_is_array(av) && strcmp(json_string_value(json_array_get(av, 0)), argv0) == 0 &&
            (!argv2 || (json_array_get(av, 2) && strncmp(json_string_value(json_array_get(av, 2)), argv2, strlen(argv2)) == 0)))
            return p;
    }
    return NULL;
}

/* Runs the loop until pred holds (10 s at most: an event never comes). */
static void run_until(fx *f, bool (*pred)(fx *))
{
    for (int i = 0; i < 1000 && !pred(f); i++) {
        uv_run(&f->loop, UV_RUN_NOWAIT);
        usleep(10000);
    }
}

static bool have_exit7(fx *f)
{
    json_t *p = find(f, "process", "/bin/sh", NULL);
    return p && json_is_integer(json_object_get(p, "exit_code"));
}

/* A program of a tracked process: argv, cwd, parent, exit status; a host
 * program outside the set: nothing. */
static void test_records_descendants_only(void **state)
{
    fx *f = *state;
    int in[2], up[2];
    assert_int_equal(pipe(in), 0);
    assert_int_equal(pipe(up), 0);
    sg_err err = {0};
    /* the program says when it runs (up), then waits for its stdin (in) */
    f->init = start_init(f, "exec /bin/sh -c 'echo up >&7; read x; exit 7' <&8", up[1], in[0]);
    close(in[0]);
    close(up[1]);
    f->p = sg_procevents_new(&f->loop, f->init, collect, f, &err);
    assert_non_null(f->p);
    sg_procevents_exec_begin(f->p, 9, NULL, NULL);
    assert_int_equal(write(f->go[1], "g", 1), 1);
    /* a host program, not a descendant of the init */
    int st;
    pid_t other = fork();
    if (other == 0) {
        execl("/bin/true", "true", (char *)NULL);
        _exit(127);
    }
    waitpid(other, &st, 0);
    pid_t prog = 0;
    assert_int_equal(read(f->rep[0], &prog, sizeof prog), sizeof prog);
    char b[3];
    assert_int_equal(read(up[0], b, 3), 3); /* it runs: its events are queued */
    close(up[0]);
    sg_procevents_drain(f->p);              /* argv read while it lives */
    assert_int_equal(write(in[1], "x\n", 2), 2);
    close(in[1]);
    run_until(f, have_exit7);
    json_t *p = find(f, "process", "/bin/sh", "echo up >&");
    assert_non_null(p);
    assert_int_equal(json_integer_value(json_object_get(p, "exit_code")), 7);
    assert_int_equal(json_integer_value(json_object_get(p, "pid")), prog); /* its namespace's pid: 2 */
    assert_int_equal(prog, 2);
    assert_int_equal(json_integer_value(json_object_get(p, "ppid")), 1);
    assert_int_equal(json_integer_value(json_object_get(p, "exec_id")), 9);
    assert_true(json_is_false(json_object_get(p, "background")));
    assert_non_null(json_string_value(json_object_get(p, "cwd")));
    assert_null(find(f, "process", "true", NULL));
    sg_procevents_exec_end(f->p, 9);
    assert_null(find(f, "limit", NULL, NULL));
}

static bool have_limit(fx *f)
{
    return find(f, "limit", NULL, NULL) != NULL;
}

/* Past SG_PROC_EVENTS_MAX programs in a window: one limit event. */
static void test_cap(void **state)
{
    fx *f = *state;
    sg_err err = {0};
    char script[160];
    snprintf(script, sizeof script, "i=0; while [ $i -lt %d ]; do /bin/true; i=$((i+1)); done; echo > /dev/null",
             SG_PROC_EVENTS_MAX + 20);
    f->init = start_init(f, script, -1, -1);
    f->p = sg_procevents_new(&f->loop, f->init, collect, f, &err);
    assert_non_null(f->p);
    sg_procevents_exec_begin(f->p, 1, NULL, NULL);
    assert_int_equal(write(f->go[1], "g", 1), 1);
    /* init says when its child was reaped (its exit is queued by then) */
    pid_t c;
    int st;
    assert_int_equal(read(f->rep[0], &c, sizeof c), sizeof c);
    assert_int_equal(read(f->rep[0], &st, sizeof st), sizeof st);
    assert_int_equal(st, 0);
    sg_procevents_exec_end(f->p, 1);
    run_until(f, have_limit);
    size_t n = 0, i;
    json_t *e;
    json_array_foreach(f->evs, i, e) n += strcmp(json_string_value(json_array_get(e, 0)), "process") == 0;
    assert_int_equal(n, SG_PROC_EVENTS_MAX);
    json_t *l = find(f, "limit", NULL, NULL);
    assert_non_null(l);
    assert_string_equal(json_string_value(json_object_get(l, "what")), "process");
    assert_true(json_integer_value(json_object_get(l, "not_reported")) > 0);
}

int main(void)
{
    if (geteuid() != 0) {
        printf("1..0 # SKIP the process events connector needs root\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_records_descendants_only, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cap, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
