/* webdir: where the web pages are found: `sandglass serve`'s terminal
 * (terminal.html, its script, vendor/xterm.js ...) and the ingest's
 * console (console/); meson.build stages and installs them together. */
#ifndef SG_BASE_WEBDIR_H
#define SG_BASE_WEBDIR_H

#include <stddef.h>

/* The web directory, in this order: $SANDGLASS_WEB_DIR when set; else
 * the first that holds terminal.html and vendor/xterm.js of
 *   1. <this binary's directory>/SG_WEB_REL: an installed sandglassd in
 *      $prefix/libexec finds $prefix/share/sandglass/web, wherever the
 *      prefix was moved (a DESTDIR install, a relocated tree);
 *   2. <this binary's directory>/web: a build tree's staged copy (the
 *      developer's: ninja stages it from the source tree's web/);
 *   3. SG_WEB_DATADIR, the configured $datadir/sandglass/web.
 * None: the first candidate, whose absence sg_serve_start reports. serve's
 * --web overrides all of these (cli/cmd_serve.c). */
void sg_web_dir(char *buf, size_t size);

#endif
