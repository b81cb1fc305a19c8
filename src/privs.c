/* privs: not written yet. */
