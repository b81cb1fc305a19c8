print("1..0 # not written yet")
