/* spool: not written yet. */
