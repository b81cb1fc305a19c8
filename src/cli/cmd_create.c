/* cmd_create: not written yet. */
