/* testrule: not written yet. */
