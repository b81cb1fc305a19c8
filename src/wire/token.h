/* token: the ingest's tokens, stateless and checkable on any node.
 *
 *   token  = base64url(claims) "." base64url(HMAC-SHA256(secret, base64url(claims)))
 *
 * Kinds, told apart by the "r" and "x" claims, and each verifier
 * refuses the other kinds:
 *   stream token  {"l": learner, "t": task, "s": sandbox, "exp": unix seconds}
 *                 may only write: open /v1/ingest for exactly that stream.
 *   read token    {"r": 1, ["l": learner,] ["t": task,] ["s": sandbox,] "exp": ...}
 *                 may only read (/v1/events, /v1/sandboxes), limited to the
 *                 events matching every scope claim it has; none at all is
 *                 an operator token (every event).
 *   terminal token {"x": 1, "l": learner, "t": task, "s": sandbox, "exp": ...}
 *                 may only open a terminal (a shell) in that one sandbox,
 *                 whose record must name the same learner and task, through
 *                 `sandglass serve` (src/serve/terminal.h); it reads nothing.
 *   watch token   {"x": 2, "l": learner, "t": task, "s": sandbox, "exp": ...}
 *                 may only watch that sandbox's terminal, read-only (not
 *                 yet accepted by serve: issue 25, "Watch live").
 *   revoke token  {"rv": token id, "exp": ...}
 *                 may only revoke the one token it names (GET /v1/revoke on
 *                 an ingest; `sandglass token revoke`), short-lived.
 *   host token    {"h": host name, "exp": ...}
 *                 may only register that one sandbox host (POST /v1/hosts:
 *                 `sandglass host`'s heartbeat), short-lived; it reads and
 *                 streams nothing, and no other kind registers a host. A
 *                 verifier that predates it takes it for a stream token
 *                 without "l": malformed, refused.
 *   action token  {"a": "abort"|"destroy", "s": sandbox, "n": nonce, "exp": ...}
 *                 may only abort or destroy that one sandbox through the
 *                 serve of the host it lives on (POST /v1/abort,
 *                 /v1/destroy: `sandglass abort|destroy` of a sandbox on
 *                 another host), once: it lives SG_TOKEN_ACTION_TTL_S
 *                 (a verifier refuses one whose exp lies further ahead than
 *                 that and SG_TOKEN_ACTION_SKEW_S), and serve remembers its
 *                 nonce (32 random hex digits) until exp, refusing it again.
 *                 A verifier that predates it refuses it as malformed (a
 *                 stream token without "l").
 *   operator write token {"o": "import"|"purge", "n": nonce, "exp": ...}
 *                 may only import a JSONL export into, or purge from, the
 *                 ingest's store (POST /v1/import, /v1/purge), made from
 *                 the ingest's secret by the operator; it lives
 *                 SG_TOKEN_ACTION_TTL_S (a longer one is refused), the
 *                 ingest remembers its nonce until exp (sg_token_nonces:
 *                 once per node), and it reads nothing. A verifier that predates it refuses it as
 *                 malformed (a stream token without "l").
 *
 * A token's id is the first 16 hex digits of the SHA-256 of its text
 * (sg_token_id): logs name a token by it, and revocation is by it (the
 * ingest's sg_revoked_tokens, checked on every request on every node), so a
 * token can be withdrawn without rotating the secret.
 *
 * The secret is 32 random bytes kept hex-encoded in a file of mode 0600
 * (<state>/ingest/secret by default); a file readable by group or others is
 * refused. */
#ifndef SG_TOKEN_H
#define SG_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/bounds.h"
#include "base/err.h"

/* Lifetime of the stream token a captured supervisor's uplink makes. */
#define SG_TOKEN_STREAM_TTL_S (30 * 24 * 3600)

#define SG_TOKEN_SECRET_LEN 32
#define SG_TOKEN_MAX 2048               /* bytes of a token we accept */
#define SG_TOKEN_TTL_DEFAULT (7 * 24 * 3600)
#define SG_TOKEN_TTL_MAX (366LL * 24 * 3600)
#define SG_TOKEN_ID_LEN 16              /* hex digits of a token's id */
#define SG_TOKEN_ACTION_TTL_S 60        /* an action token's lifetime */
#define SG_TOKEN_ACTION_SKEW_S 30       /* clocks' difference an action token's exp may show */
#define SG_TOKEN_NONCE_LEN 32           /* hex digits of an action token's nonce */

typedef struct sg_token_claims {
    /* Stream tokens: all three set. Read tokens: "" where unscoped. */
    char learner[SG_NAME_MAX + 1];
    char task[SG_NAME_MAX + 1];
    char sandbox[SG_NAME_MAX + 1];
    int64_t exp;                        /* unix seconds */
    bool read;                          /* a read token */
    bool terminal;                      /* a terminal token */
    bool watch;                         /* a watch token */
    char id[SG_TOKEN_ID_LEN + 1];       /* the token's id (sg_token_id) */
    char revoke[SG_TOKEN_ID_LEN + 1];   /* a revoke token: the id it revokes */
    char host[SG_NAME_MAX + 1];         /* a host token: the host it registers */
    char action[8];                     /* an action token: "abort" or "destroy" (sandbox: its sandbox) */
    char nonce[SG_TOKEN_NONCE_LEN + 1]; /* ... and its nonce (an operator write token's too) */
    char op[8];                         /* an operator write token: "import" or "purge" */
} sg_token_claims;

/* The token's id: the first 16 hex digits (lowercase) of SHA-256(token). */
void sg_token_id(const char *token, char out[SG_TOKEN_ID_LEN + 1]);
/* Whether s is a token id: exactly 16 lowercase hex digits. */
bool sg_token_id_valid(const char *s);

/* Reads the secret; refuses a missing, malformed, non-regular, or group- or
 * world-accessible file. */
int sg_token_secret_load(const char *path, uint8_t secret[SG_TOKEN_SECRET_LEN], sg_err *err);
/* Loads the secret, creating it (32 random bytes, mode 0600, parent
 * directories 0700) if the file does not exist. Safe against a concurrent
 * creator: the file appears whole or not at all. */
int sg_token_secret_ensure(const char *path, uint8_t secret[SG_TOKEN_SECRET_LEN], sg_err *err);

/* A token for (learner, task, sandbox) valid ttl_s seconds from now (names
 * must pass sg_valid_name). Caller frees. */
char *sg_token_make(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *learner,
                    const char *task, const char *sandbox, int64_t ttl_s, sg_err *err);
/* Same with an absolute expiry (tests). */
char *sg_token_make_exp(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *learner,
                        const char *task, const char *sandbox, int64_t exp, sg_err *err);

/* Checks signature (constant time) then expiry against now (unix seconds).
 * err says "malformed token: ...", "bad signature", "token expired", or
 * "a read token cannot stream events". */
int sg_token_verify(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token,
                    int64_t now, sg_token_claims *out, sg_err *err);

/* A read token; learner, task, sandbox: NULL (or "") for unscoped. */
char *sg_token_make_read(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *learner,
                         const char *task, const char *sandbox, int64_t ttl_s, sg_err *err);
/* Checks a read token as sg_token_verify does a stream token; a stream
 * token is refused ("a stream token cannot read"). */
int sg_token_verify_read(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token,
                         int64_t now, sg_token_claims *out, sg_err *err);

/* A terminal token for one sandbox (all three names required). */
char *sg_token_make_terminal(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *learner,
                             const char *task, const char *sandbox, int64_t ttl_s, sg_err *err);
/* Checks a terminal token; the other kinds are refused. */
int sg_token_verify_terminal(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token,
                             int64_t now, sg_token_claims *out, sg_err *err);

/* A watch token for one sandbox (all three names required). */
char *sg_token_make_watch(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *learner,
                          const char *task, const char *sandbox, int64_t ttl_s, sg_err *err);
/* Checks a watch token; the other kinds are refused, and it is refused by
 * their verifiers. */
int sg_token_verify_watch(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token,
                          int64_t now, sg_token_claims *out, sg_err *err);

/* A revoke token for the token whose id is id, valid ttl_s seconds. */
char *sg_token_make_revoke(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *id, int64_t ttl_s,
                           sg_err *err);
/* Checks a revoke token (out->revoke: the id it revokes); the other kinds
 * are refused, and it is refused by their verifiers. */
int sg_token_verify_revoke(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token,
                           int64_t now, sg_token_claims *out, sg_err *err);

/* A host token for the sandbox host named host (sg_valid_name), valid
 * ttl_s seconds. */
char *sg_token_make_host(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *host, int64_t ttl_s, sg_err *err);
/* Same with an absolute expiry (tests). */
char *sg_token_make_host_exp(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *host, int64_t exp,
                             sg_err *err);
/* Checks a host token (out->host: the host it registers); the other kinds
 * are refused, and it is refused by their verifiers. */
int sg_token_verify_host(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token, int64_t now,
                         sg_token_claims *out, sg_err *err);

/* An action token: action ("abort" or "destroy") on sandbox, with a fresh
 * random nonce, valid SG_TOKEN_ACTION_TTL_S seconds from now. */
char *sg_token_make_action(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *action, const char *sandbox,
                           sg_err *err);
/* Same with an absolute expiry and a given nonce (tests). */
char *sg_token_make_action_exp(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *action, const char *sandbox,
                               const char *nonce, int64_t exp, sg_err *err);
/* Checks an action token (out->action, out->sandbox, out->nonce); one whose
 * exp lies more than SG_TOKEN_ACTION_TTL_S + SG_TOKEN_ACTION_SKEW_S ahead
 * of now is refused ("action token lives too long"); the other kinds are
 * refused, and it is refused by their verifiers. Whether its nonce was
 * seen is the caller's to remember. */
int sg_token_verify_action(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token, int64_t now,
                           sg_token_claims *out, sg_err *err);

/* An operator write token for op ("import" or "purge"), with a fresh
 * nonce, valid SG_TOKEN_ACTION_TTL_S seconds from now. */
char *sg_token_make_op(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *op, sg_err *err);
/* Same with a given nonce and an absolute expiry (tests). */
char *sg_token_make_op_exp(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *op, const char *nonce, int64_t exp,
                           sg_err *err);
/* Checks an operator write token (out->op, out->nonce); one whose exp lies
 * more than SG_TOKEN_ACTION_TTL_S + SG_TOKEN_ACTION_SKEW_S ahead is
 * refused; the other kinds are refused, and it is refused by theirs. */
int sg_token_verify_op(const uint8_t secret[SG_TOKEN_SECRET_LEN], const char *token, int64_t now, sg_token_claims *out,
                       sg_err *err);

/* The nonces of single-use tokens (action, operator write) taken by one
 * verifier, each remembered until its token's exp: a token is taken once. */
#define SG_TOKEN_NONCES_MAX 4096
typedef struct sg_token_nonces {
    struct {
        char nonce[SG_TOKEN_NONCE_LEN + 1];
        int64_t exp;
    } v[SG_TOKEN_NONCES_MAX];
    size_t n;
} sg_token_nonces;
/* Whether nonce was taken (and its exp not passed); if not, takes it until
 * exp: 0 taken now, 1 a replay, -1 no room left (SG_TOKEN_NONCES_MAX not
 * expired). */
int sg_token_nonce_take(sg_token_nonces *s, const char *nonce, int64_t exp, int64_t now);

#endif
