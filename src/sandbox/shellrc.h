/* shellrc: the shell integration the host supplies to every sandbox, as
 * read-only files under /etc/sandglass/ (rootfs.c writes them into the
 * root skeleton before it is made read-only):
 *
 *   shell    what `sandglass shell` runs (with /bin/sh): bash if the
 *            sandbox has it, else sh, each with the file below
 *   bashrc   bash's rc: the login set-up (/etc/profile, ~/.bashrc), then
 *            an OSC 133 mark around each line typed (PS0: one command
 *            however many ';', '&&' or pipes it holds)
 *   shrc     sh's $ENV: marks at each prompt only (sh has no hook before a
 *            command: its prompts give the exit status and the cwd, and
 *            B says cmdline=echo: the supervisor reads the command line
 *            from the terminal's echo, src/capture/echoline.h)
 *
 * The marks, as the supervisor parses them (src/capture/marks.h):
 *   ESC ] 133 ; A ; cwd=DIR BEL          a prompt starts
 *   ESC ] 133 ; B [; cmdline=echo] BEL   the prompt ends: typing starts
 *   ESC ] 133 ; C ; cwd=DIR ; cmd=TEXT BEL   a command starts (TEXT: the rest)
 *   ESC ] 133 ; D ; STATUS BEL           the command ended with STATUS
 * They come from inside the sandbox: a learner can remove or forge them.
 * The raw terminal stream the supervisor keeps is the record. */
#ifndef SG_SHELLRC_H
#define SG_SHELLRC_H

#include "base/err.h"

#define SG_SHELLRC_DIR "/etc/sandglass"
#define SG_SHELLRC_LAUNCHER SG_SHELLRC_DIR "/shell"

/* Writes the three files into dir (a directory it creates, 0755; the
 * files 0644). */
int sg_shellrc_write(const char *dir, sg_err *err);

#endif
