/* cmd_destroy: not written yet. */
