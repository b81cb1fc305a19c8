/* capmod: loads the capture (capture.h) as a shared module,
 * sandglass-capture.so, when a sandbox first needs it.
 *
 * Why: the capture's uplink is libwebsockets, which brings OpenSSL; mapped
 * into every supervisor they cost ~2 MiB resident each, and a sandbox
 * without a task never captures. The module sits next to the supervisor
 * binary ($SANDGLASS_CAPTURE_MODULE overrides) and is never unloaded. */
#ifndef SG_CAPTURE_MODULE_H
#define SG_CAPTURE_MODULE_H

#include "base/err.h"
#include "capture/capture.h"

/* The capture's entry points (loaded once per process), or NULL with err. */
const sg_capture_api *sg_capture_module_load(sg_err *err);

#endif
