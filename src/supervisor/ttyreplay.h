/* ttyreplay: what an attach may show again of a terminal's past output.
 *
 * A full-screen program asks its terminal things (the cursor position,
 * the device attributes, a setting, a colour, the clipboard...) and the
 * terminal answers as if typed. Replayed on reattach, those questions are
 * asked again of the new terminal, and its answers reach the shell as the
 * learner's typing (`bash: 2RRecho: command not found`). This filter
 * passes a terminal's output with every sequence that makes a terminal
 * answer left out:
 *
 *  - CSI: DSR (n), DA1/DA2/DA3 (c), DECREQTPARM (x), window ops and their
 *    reports (t), XTVERSION (>q), DECRQM ($p), DECRQPSR ($w), DECRQTSR
 *    ($u), DECRQUPSS (&u), the kitty keyboard query (?u), XTQMODKEYS (?m),
 *    XTSMGRAPHICS (?S), DECRQCRA (*y), XTREPORTSGR (#|), DECRQDE ("v);
 *  - ESC Z (DECID);
 *  - DCS: all but sixel pictures (DECRQSS $q, XTGETTCAP +q, tmux's
 *    passthrough, which may wrap any query);
 *  - OSC: the clipboard (52) and the iTerm2/kitty extensions (1337, 5113,
 *    5522) always; any other with a '?' in it (4/10/11/12... colour
 *    queries), except titles, cwd, hyperlinks and the shell marks (0, 1,
 *    2, 7, 8, 133), which ask nothing;
 *  - SOS, PM, APC strings (the kitty graphics protocol answers APCs).
 *
 * The C1 forms (8-bit, or UTF-8 encoded as C2 80..9F) count as their ESC
 * forms. It parses as a terminal does, from the state a terminal is in
 * when the replay starts (ground): whatever the terminal would take for a
 * sequence, the filter sees as one. What it passes is ground text and
 * whole sequences it judged harmless, so what it leaves out cannot join
 * what is left into a new sequence. Input may come in pieces cut
 * anywhere; "mid_stream" (the replay buffer wrapped) drops the bytes
 * before the first ESC or through the first newline, a sequence's tail. */
#ifndef SG_SUP_TTYREPLAY_H
#define SG_SUP_TTYREPLAY_H

#include <stdbool.h>
#include <stddef.h>

/* A sequence held until it is judged: an OSC longer is judged by its
 * number alone, a CSI longer is left out. */
#define SG_TTYREPLAY_HOLD 4096
#define SG_TTYREPLAY_CSI_MAX 256

typedef void (*sg_ttyreplay_out)(void *ud, const char *buf, size_t len);

typedef struct sg_ttyreplay {
    int state;
    int kind;              /* the string's: OSC, DCS, other */
    int str;               /* in a string: hold, pass or drop */
    bool dcs_head;         /* in a DCS's parameters, before its final byte */
    size_t body;           /* where the held sequence's parameters start */
    bool resync;           /* mid_stream: still before the first safe start */
    bool c2;               /* a 0xC2 came last: a UTF-8 C1 may follow */
    int u8_left;           /* continuation bytes a UTF-8 character still has */
    bool overflow;         /* the held CSI or DCS header went past its bound */
    char held[SG_TTYREPLAY_HOLD];
    size_t held_len;
    unsigned char c1raw[2]; /* a UTF-8 C1 control cut between two pieces */
    /* the run of input bytes passed on but not yet given to out */
    const char *run;
    size_t run_len;
    sg_ttyreplay_out out;
    void *ud;
} sg_ttyreplay;

void sg_ttyreplay_init(sg_ttyreplay *f, bool mid_stream, sg_ttyreplay_out out, void *ud);
void sg_ttyreplay_feed(sg_ttyreplay *f, const char *buf, size_t len);
/* The output ended: a sequence still held is left out (the terminal stays
 * in ground); a passed string stays open (the live output goes on). */
void sg_ttyreplay_end(sg_ttyreplay *f);

#endif
