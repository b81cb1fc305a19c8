/* tools: the tools `sandglass mcp` serves, one table entry each. An entry
 * is everything about its tool: name, title and description; its input
 * schema as JSON text (tools/list shows it and the arguments are checked
 * against it, so the two cannot disagree); whether it may write the
 * workspace (the core runs such calls one at a time: mcp.h); how a call
 * becomes a control request for the supervisor (plan); and how the
 * supervisor's answer becomes the result's text (shape). Adding a tool is
 * adding an entry to sg_mcp_tools[] in tools.c. */
#ifndef SG_MCP_TOOLS_H
#define SG_MCP_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"

struct sg_mcp_call;

typedef struct sg_mcp_tool {
    const char *name;
    const char *title;
    const char *description;
    /* {"properties": {...}, "required": [...]} of the inputSchema. */
    const char *schema;
    /* May change the workspace: checkpointed before it runs (by the
     * supervisor) and run alone, after every call sent before it. */
    bool writes;
    /* annotations.destructiveHint: may remove or overwrite what exists. */
    bool destructive;
    /* Bytes of stdout kept for the result. */
    size_t out_cap;
    /* Sets c->req (and c->input, c->path, ...) from arguments that passed
     * the schema. Returns NULL, or why the call fails as a tool error (a
     * static string or written into why). */
    const char *(*plan)(struct sg_mcp_call *c, const json_t *args, const char *workspace, char *why,
                        size_t whylen);
    /* Appends the result's text from the supervisor's RESULT object to t:
     * returns 1 when the call failed (isError), 0 when it did not, -1 out
     * of memory (the text is bounded by the output caps: bounds.h). */
    int (*shape)(const struct sg_mcp_call *c, const json_t *res, sg_buf *t);
    /* Optional, a dialogue with the command: called as its stdout comes;
     * returns 1 once out holds the bytes for its stdin (then never again),
     * 0 not yet, -1 out of memory. The transport then gives the command a
     * pipe it keeps the writing end of, instead of c->input. */
    int (*reply)(struct sg_mcp_call *c, sg_buf *out);
} sg_mcp_tool;

extern const sg_mcp_tool sg_mcp_tools[];
extern const size_t sg_mcp_ntools;

/* The tool named name, or NULL. */
const sg_mcp_tool *sg_mcp_tool_find(const char *name);
/* Appends the names of the tools (writes: 1 those that may write, 0 those
 * that only read, -1 all), ", " between them. -1 on out of memory. */
int sg_mcp_tool_names(sg_buf *b, int writes);
/* The tools/list entry of t. */
json_t *sg_mcp_tool_def(const sg_mcp_tool *t);
/* Checks args against t's schema: NULL when they fit, else what is wrong
 * ("unknown property 'x'"), written into why. */
const char *sg_mcp_tool_check_args(const sg_mcp_tool *t, const json_t *args, char *why, size_t whylen);

#endif
