/* bench_ingest: ingest throughput against its two ceilings, in one run, on
 * the same events.
 *
 *   1. parse   jansson strict parse (JSON_REJECT_DUPLICATES) of every frame
 *   2. sqlite  raw batched INSERT into the same schema, synchronous=FULL,
 *              WAL, batches of 1000, one connection
 *   3. ingest  the real `sandglassd ingest` on loopback, CONNS concurrent
 *              WebSocket connections sending pre-built masked frames; the
 *              clock stops when every connection has its last seq acked
 *              (i.e. committed durably).
 *
 * usage: bench_ingest SANDGLASSD [EVENTS [CONNS]]   (default 200000 32)
 * Writes bench/results/ingest.json (or $SG_BENCH_OUT). Not a test.
 *
 * PostgreSQL mode (bench/bench_ingest_pg.sh): with SG_BENCH_PG=postgresql://...
 * the ingest runs with --store on that server, and ceiling 2 is a raw
 * batched INSERT (1000-row multi-VALUES statements, one per transaction,
 * ON CONFLICT DO NOTHING) into the same server; results go to
 * bench/results/ingest_pg.json. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/util.h"
#include "wire/token.h"

typedef struct frame {
    char *text;
    size_t len;
    int conn;
    int64_t seq;
} frame;

typedef struct bconn {
    int fd;
    char sandbox[32];
    unsigned char *out; /* all this connection's frames, masked */
    size_t out_len, out_off;
    int64_t last_seq, acked;
    unsigned char in[65536];
    size_t in_len;
} bconn;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    perror(what);
    exit(1);
}

static const char *const filler =
    "collected 12 items / test_parse.py ........ [ 66%] test_eval.py .... [100%] "
    "12 passed in 0.31s; PASS ok github.com/x/y 0.012s; build finished ok";

static frame *make_frames(size_t n, int conns)
{
    frame *f = calloc(n, sizeof *f);
    int64_t *seq = calloc((size_t)conns, sizeof *seq);
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i % (size_t)conns);
        char sb[32];
        snprintf(sb, sizeof sb, "bench%03d", c);
        json_t *payload;
        const char *kind;
        switch (i % 4) {
        case 0:
            kind = "command";
            payload = json_pack("{s:s}", "cmd", "pytest -q tests/test_parse.py");
            break;
        case 1:
            kind = "stdout";
            payload = json_pack("{s:s, s:s}", "stream", "stdout", "data", filler);
            break;
        case 2:
            kind = "run_result";
            payload = json_pack("{s:s, s:i, s:f, s:b}", "cmd", "pytest -q tests/test_parse.py",
                                "exit_code", 0, "duration_s", 0.312456, "timed_out", 0);
            break;
        default:
            kind = "activity";
            payload = json_pack("{s:s, s:i}", "state", "idle", "spooled", 3);
            break;
        }
        json_t *ev = json_pack("{s:I, s:s, s:o, s:s, s:s}", "seq", (json_int_t)seq[c], "kind",
                               kind, "payload", payload, "ts", "2026-11-29T17:00:00.123456+00:00",
                               "sandbox_id", sb);
        f[i].text = json_dumps(ev, JSON_COMPACT);
        f[i].len = strlen(f[i].text);
        f[i].conn = c;
        f[i].seq = seq[c]++;
        json_decref(ev);
    }
    free(seq);
    return f;
}

/* ---- ceiling 1: strict parse */
static double bench_parse(frame *f, size_t n)
{
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        json_error_t je;
        json_t *j = json_loadb(f[i].text, f[i].len, JSON_REJECT_DUPLICATES, &je);
        if (!j) {
            fprintf(stderr, "parse failed: %s\n", je.text);
            exit(1);
        }
        json_decref(j);
    }
    return (double)n / (now_s() - t0);
}

/* ---- ceiling 2: raw batched SQLite insert */
static double bench_sqlite(frame *f, size_t n, const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/raw.db", dir);
    /* Payload text and kind extracted up front: only the insert is timed. */
    char **payload = calloc(n, sizeof *payload);
    const char **kind = calloc(n, sizeof *kind);
    for (size_t i = 0; i < n; i++) {
        json_t *j = json_loadb(f[i].text, f[i].len, 0, NULL);
        payload[i] = json_dumps(json_object_get(j, "payload"), JSON_COMPACT);
        kind[i] = strstr(f[i].text, "\"command\"") ? "command" : "stdout";
        json_decref(j);
    }
    sqlite3 *db;
    if (sqlite3_open(path, &db) != SQLITE_OK)
        die("sqlite3_open");
    sqlite3_exec(db,
                 "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                 "CREATE TABLE events (id INTEGER PRIMARY KEY, learner TEXT NOT NULL,"
                 " task TEXT NOT NULL, sandbox TEXT NOT NULL, seq INTEGER NOT NULL,"
                 " kind TEXT NOT NULL, ts TEXT NOT NULL, received TEXT NOT NULL,"
                 " payload TEXT NOT NULL, UNIQUE (learner, task, sandbox, seq));",
                 NULL, NULL, NULL);
    sqlite3_stmt *st;
    sqlite3_prepare_v2(db,
                       "INSERT OR IGNORE INTO events (learner, task, sandbox, seq, kind, ts,"
                       " received, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                       -1, &st, NULL);
    double t0 = now_s();
    for (size_t i = 0; i < n; i += 1000) {
        sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
        for (size_t k = i; k < n && k < i + 1000; k++) {
            char sb[32];
            snprintf(sb, sizeof sb, "bench%03d", f[k].conn);
            char recv_ts[40];
            sg_now_iso8601(recv_ts, sizeof recv_ts);
            sqlite3_bind_text(st, 1, "learner", -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 2, "task", -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 3, sb, -1, SQLITE_TRANSIENT);
            sqlite3_bind_int64(st, 4, f[k].seq);
            sqlite3_bind_text(st, 5, kind[k], -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 6, "2026-11-29T17:00:00.123456+00:00", -1, SQLITE_STATIC);
            sqlite3_bind_text(st, 7, recv_ts, -1, SQLITE_TRANSIENT);
            sqlite3_bind_text(st, 8, payload[k], -1, SQLITE_STATIC);
            if (sqlite3_step(st) != SQLITE_DONE)
                die("sqlite insert");
            sqlite3_reset(st);
        }
        if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
            die("sqlite commit");
    }
    double rate = (double)n / (now_s() - t0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    for (size_t i = 0; i < n; i++)
        free(payload[i]);
    free(payload);
    free(kind);
    return rate;
}

/* ---- ceiling 2 (PostgreSQL mode): raw batched INSERT into the same server */
static double bench_pg(frame *f, size_t n, const char *url)
{
    PGconn *db = PQconnectdb(url);
    if (PQstatus(db) != CONNECTION_OK) {
        fprintf(stderr, "postgresql: %s", PQerrorMessage(db));
        exit(1);
    }
    PGresult *r = PQexec(db, "SET client_min_messages = warning; DROP TABLE IF EXISTS bench_raw;"
                             "CREATE TABLE bench_raw (id bigint GENERATED ALWAYS AS IDENTITY"
                             " PRIMARY KEY, learner text NOT NULL, task text NOT NULL,"
                             " sandbox text NOT NULL, seq bigint NOT NULL, kind text NOT NULL,"
                             " ts text NOT NULL, received text NOT NULL, payload text NOT NULL,"
                             " UNIQUE (learner, task, sandbox, seq))");
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
        fprintf(stderr, "postgresql: %s", PQresultErrorMessage(r));
        exit(1);
    }
    PQclear(r);
    char **payload = calloc(n, sizeof *payload), **sb = calloc(n, sizeof *sb),
         **seq = calloc(n, sizeof *seq);
    const char **kind = calloc(n, sizeof *kind);
    for (size_t i = 0; i < n; i++) {
        json_t *j = json_loadb(f[i].text, f[i].len, 0, NULL);
        payload[i] = json_dumps(json_object_get(j, "payload"), JSON_COMPACT);
        kind[i] = strstr(f[i].text, "\"command\"") ? "command" : "stdout";
        json_decref(j);
        sb[i] = malloc(32);
        snprintf(sb[i], 32, "bench%03d", f[i].conn);
        seq[i] = malloc(24);
        snprintf(seq[i], 24, "%lld", (long long)f[i].seq);
    }
    enum { B = 1000 };
    size_t sqlcap = 64 + (size_t)B * 64;
    char *sql = malloc(sqlcap);
    const char **params = calloc((size_t)B * 8, sizeof *params);
    char (*recv_ts)[40] = calloc(B, sizeof *recv_ts);
    double t0 = now_s();
    for (size_t i = 0; i < n; i += B) {
        size_t m = n - i < B ? n - i : B;
        size_t off = (size_t)snprintf(sql, sqlcap, "INSERT INTO bench_raw (learner, task,"
                                      " sandbox, seq, kind, ts, received, payload) VALUES ");
        for (size_t k = 0; k < m; k++) {
            size_t p = k * 8;
            off += (size_t)snprintf(sql + off, sqlcap - off,
                                    "%s($%zu,$%zu,$%zu,$%zu::bigint,$%zu,$%zu,$%zu,$%zu)",
                                    k ? "," : "", p + 1, p + 2, p + 3, p + 4, p + 5, p + 6,
                                    p + 7, p + 8);
            sg_now_iso8601(recv_ts[k], sizeof recv_ts[k]);
            const char *v[8] = {"learner", "task", sb[i + k], seq[i + k], kind[i + k],
                                "2026-11-29T17:00:00.123456+00:00", recv_ts[k], payload[i + k]};
            memcpy(&params[p], v, sizeof v);
        }
        snprintf(sql + off, sqlcap - off, " ON CONFLICT DO NOTHING");
        /* One statement is one transaction: committed (fsync) on return. */
        r = PQexecParams(db, sql, (int)(m * 8), NULL, params, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            fprintf(stderr, "postgresql insert: %s", PQresultErrorMessage(r));
            exit(1);
        }
        PQclear(r);
    }
    double rate = (double)n / (now_s() - t0);
    PQclear(PQexec(db, "DROP TABLE bench_raw"));
    PQfinish(db);
    for (size_t i = 0; i < n; i++) {
        free(payload[i]);
        free(sb[i]);
        free(seq[i]);
    }
    free(payload);
    free(sb);
    free(seq);
    free(kind);
    free(sql);
    free(params);
    free(recv_ts);
    return rate;
}

/* ---- 3: the real ingest */
static const char *bench_store; /* --store for the ingest; NULL: its SQLite default */

static void append_masked(bconn *c, const char *text, size_t len)
{
    unsigned char hdr[14];
    size_t h = 0;
    hdr[h++] = 0x81;
    if (len < 126) {
        hdr[h++] = (unsigned char)(0x80 | len);
    } else if (len < 65536) {
        hdr[h++] = 0x80 | 126;
        hdr[h++] = (unsigned char)(len >> 8);
        hdr[h++] = (unsigned char)len;
    } else {
        fprintf(stderr, "frame too long for the bench\n");
        exit(1);
    }
    unsigned char mask[4] = {0x12, 0x34, 0x56, 0x78};
    memcpy(hdr + h, mask, 4);
    h += 4;
    memcpy(c->out + c->out_len, hdr, h);
    c->out_len += h;
    for (size_t i = 0; i < len; i++)
        c->out[c->out_len + i] = (unsigned char)text[i] ^ mask[i & 3];
    c->out_len += len;
}

static int ws_connect(int port, const char *token)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect");
    char req[4096];
    int n = snprintf(req, sizeof req,
                     "GET /v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                     "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                     "Sec-WebSocket-Version: 13\r\nAuthorization: Bearer %s\r\n\r\n",
                     token);
    if (sg_write_all(fd, req, (size_t)n) < 0)
        die("write handshake");
    /* Read exactly the response head, byte by byte (once per connection). */
    char head[4096];
    size_t hl = 0;
    while (hl < sizeof head - 1) {
        if (read(fd, head + hl, 1) != 1)
            die("read handshake");
        hl++;
        if (hl >= 4 && memcmp(head + hl - 4, "\r\n\r\n", 4) == 0)
            break;
    }
    head[hl] = '\0';
    if (strncmp(head, "HTTP/1.1 101", 12) != 0) {
        fprintf(stderr, "handshake refused: %s\n", head);
        exit(1);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

/* Parses server frames ({"ack":N}, unmasked, short) out of c->in. */
static void parse_acks(bconn *c)
{
    size_t off = 0;
    while (c->in_len - off >= 2) {
        unsigned char b1 = c->in[off + 1];
        size_t len = b1 & 0x7F, h = 2;
        if (len >= 126) {
            fprintf(stderr, "unexpected long server frame\n");
            exit(1);
        }
        if (c->in_len - off < h + len)
            break;
        if ((c->in[off] & 0x0F) == 0x8) {
            fprintf(stderr, "server closed %s: %.*s\n", c->sandbox, (int)len, c->in + off + h);
            exit(1);
        }
        const char *p = memmem(c->in + off + h, len, "\"ack\":", 6);
        if (p)
            c->acked = strtoll(p + 6, NULL, 10);
        off += h + len;
    }
    memmove(c->in, c->in + off, c->in_len - off);
    c->in_len -= off;
}

static double bench_ingest(frame *f, size_t n, int conns, const char *bin, const char *dir,
                           uint64_t *cpu_ingest_ms)
{
    int pipefd[2];
    if (pipe(pipefd) < 0)
        die("pipe");
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 1);
        close(pipefd[0]);
        setenv("SANDGLASS_STATE_DIR", dir, 1);
        if (bench_store)
            execl(bin, bin, "ingest", "--listen", "127.0.0.1:0", "--store", bench_store,
                  (char *)NULL);
        else
            execl(bin, bin, "ingest", "--listen", "127.0.0.1:0", (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    FILE *out = fdopen(pipefd[0], "r");
    char line[256];
    if (!fgets(line, sizeof line, out)) {
        fprintf(stderr, "ingest did not start\n");
        exit(1);
    }
    int port = atoi(strrchr(line, ':') + 1);

    char secret_path[512];
    snprintf(secret_path, sizeof secret_path, "%s/ingest/secret", dir);
    uint8_t secret[SG_TOKEN_SECRET_LEN];
    sg_err err;
    if (sg_token_secret_load(secret_path, secret, &err) < 0) {
        fprintf(stderr, "%s\n", err.msg);
        exit(1);
    }
    bconn *c = calloc((size_t)conns, sizeof *c);
    size_t *bytes = calloc((size_t)conns, sizeof *bytes);
    for (size_t i = 0; i < n; i++)
        bytes[f[i].conn] += f[i].len + 8;
    for (int k = 0; k < conns; k++) {
        snprintf(c[k].sandbox, sizeof c[k].sandbox, "bench%03d", k);
        char *tok = sg_token_make(secret, "learner", "task", c[k].sandbox, 3600, &err);
        c[k].fd = ws_connect(port, tok);
        free(tok);
        c[k].out = malloc(bytes[k]);
        c[k].acked = -2;
        c[k].last_seq = -1;
    }
    for (size_t i = 0; i < n; i++) {
        append_masked(&c[f[i].conn], f[i].text, f[i].len);
        c[f[i].conn].last_seq = f[i].seq;
    }
    /* Wait for each connection's first ack (-1) so the clock starts on a
     * settled server. */
    for (int k = 0; k < conns; k++) {
        while (c[k].acked == -2) {
            struct pollfd p = {.fd = c[k].fd, .events = POLLIN};
            poll(&p, 1, 1000);
            ssize_t r = read(c[k].fd, c[k].in + c[k].in_len, sizeof c[k].in - c[k].in_len);
            if (r > 0) {
                c[k].in_len += (size_t)r;
                parse_acks(&c[k]);
            }
        }
    }

    struct pollfd *pfd = calloc((size_t)conns, sizeof *pfd);
    double t0 = now_s();
    int done = 0;
    while (done < conns) {
        for (int k = 0; k < conns; k++) {
            pfd[k].fd = c[k].fd;
            pfd[k].events = POLLIN | (c[k].out_off < c[k].out_len ? POLLOUT : 0);
        }
        if (poll(pfd, (nfds_t)conns, 10000) <= 0) {
            fprintf(stderr, "ingest stalled\n");
            exit(1);
        }
        done = 0;
        for (int k = 0; k < conns; k++) {
            if (pfd[k].revents & POLLOUT) {
                ssize_t w = write(c[k].fd, c[k].out + c[k].out_off, c[k].out_len - c[k].out_off);
                if (w > 0)
                    c[k].out_off += (size_t)w;
            }
            if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) {
                ssize_t r = read(c[k].fd, c[k].in + c[k].in_len, sizeof c[k].in - c[k].in_len);
                if (r == 0) {
                    fprintf(stderr, "ingest closed connection %d\n", k);
                    exit(1);
                }
                if (r > 0) {
                    c[k].in_len += (size_t)r;
                    parse_acks(&c[k]);
                }
            }
            if (c[k].acked == c[k].last_seq)
                done++;
        }
    }
    double rate = (double)n / (now_s() - t0);

    /* CPU the ingest used (user+sys), for the report. */
    char statp[64], buf[1024];
    snprintf(statp, sizeof statp, "/proc/%d/stat", (int)pid);
    FILE *sf = fopen(statp, "r");
    *cpu_ingest_ms = 0;
    if (sf && fgets(buf, sizeof buf, sf)) {
        char *p = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
            *cpu_ingest_ms = (uint64_t)(ut + st) * 1000 / (uint64_t)sysconf(_SC_CLK_TCK);
    }
    if (sf)
        fclose(sf);
    for (int k = 0; k < conns; k++) {
        close(c[k].fd);
        free(c[k].out);
    }
    free(c);
    free(bytes);
    free(pfd);
    kill(pid, SIGTERM);
    int status;
    waitpid(pid, &status, 0);
    fclose(out);
    return rate;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s SANDGLASSD [EVENTS [CONNS]]\n", argv[0]);
        return 2;
    }
    size_t n = argc > 2 ? strtoul(argv[2], NULL, 10) : 200000;
    int conns = argc > 3 ? atoi(argv[3]) : 32;
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/sg-bench-ingest-XXXXXX";
    if (!mkdtemp(dir))
        die("mkdtemp");

    frame *f = make_frames(n, conns);
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += f[i].len;
    printf("events: %zu, connections: %d, mean frame %zu bytes\n", n, conns, total / n);

    double parse = bench_parse(f, n);
    printf("ceiling  jansson strict parse      %10.0f events/s\n", parse);
    bench_store = getenv("SG_BENCH_PG");
    const char *db = bench_store ? "postgresql" : "sqlite";
    double sql = bench_store ? bench_pg(f, n, bench_store) : bench_sqlite(f, n, dir);
    if (bench_store)
        printf("ceiling  postgresql batched insert %10.0f events/s (1000-row INSERT per txn)\n", sql);
    else
        printf("ceiling  sqlite batched insert     %10.0f events/s (synchronous=FULL, 1000/txn)\n", sql);
    uint64_t cpu_ms = 0;
    double t0 = now_s();
    double ing = bench_ingest(f, n, conns, argv[1], dir, &cpu_ms);
    double wall = now_s() - t0;
    double lower = parse < sql ? parse : sql;
    printf("ingest   %d connections -> %s %10.0f events/s (all acked)\n", conns, db, ing);
    printf("ratio    ingest / parse  = %.2f\n", ing / parse);
    printf("ratio    ingest / %s = %.2f\n", db, ing / sql);
    printf("ratio    ingest / lower ceiling = %.2f (target >= 0.70): %s\n", ing / lower,
           ing / lower >= 0.70 ? "met" : "NOT met");
    printf("ingest process CPU: %.2f s over %.2f s of bench wall time (%.0f%% of one core)\n",
           (double)cpu_ms / 1000, wall, (double)cpu_ms / 10 / wall);

    const char *outp = getenv("SG_BENCH_OUT")  ? getenv("SG_BENCH_OUT")
                       : bench_store           ? "bench/results/ingest_pg.json"
                                               : "bench/results/ingest.json";
    json_t *res = json_pack(
        "{s:s, s:I, s:i, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:b, s:I}", "bench",
        bench_store ? "ingest_pg" : "ingest", "events", (json_int_t)n, "connections", conns,
        "mean_frame_bytes", (json_int_t)(total / n), "parse_events_per_s", parse,
        bench_store ? "pg_insert_events_per_s" : "sqlite_events_per_s", sql,
        "ingest_events_per_s", ing, "ratio_ingest_parse", ing / parse,
        bench_store ? "ratio_ingest_pg_insert" : "ratio_ingest_sqlite", ing / sql, "ratio_ingest_lower_ceiling", ing / lower, "target_met", ing / lower >= 0.70,
        "ingest_cpu_ms", (json_int_t)cpu_ms);
    char when[64];
    sg_now_iso8601(when, sizeof when);
    json_object_set_new(res, "measured_at", json_string(when));
    if (json_dump_file(res, outp, JSON_INDENT(2)) < 0)
        fprintf(stderr, "could not write %s\n", outp);
    else
        printf("written: %s\n", outp);
    json_decref(res);
    for (size_t i = 0; i < n; i++)
        free(f[i].text);
    free(f);
    sg_err err;
    sg_rm_rf(dir, &err);
    return 0;
}
