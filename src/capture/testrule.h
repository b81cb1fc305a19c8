/* testrule: decides whether a command runs a test suite, so its result is
 * reported as `test_result` instead of `run_result`.
 *
 * The rule (the original's "contains the word test" is wrong for
 * `cat test.txt`): split the command line into simple commands at ; & | &&
 * || and newlines; in each, skip leading VAR=value assignments and wrappers
 * (env, time, timeout N, nice, sudo, xvfb-run, npx, bunx, uv run, poetry
 * run, pipenv run, pdm run, hatch run, python -m, python3 -m); the command
 * is a test when what remains starts with a test runner:
 *   pytest, py.test, tox, nox, unittest (python -m unittest), nosetests,
 *   go test, cargo test, cargo nextest, npm test / npm run test*, npm t,
 *   yarn test, pnpm test, bun test, deno test, jest, vitest, mocha, ava,
 *   tap, make test|check|tests, ctest, meson test, ninja test, mvn test|verify,
 *   gradle test|check (also ./gradlew), dotnet test, rspec, rake test|spec,
 *   phpunit, mix test, swift test, prove, bats, busted, lein test,
 *   stack test, cabal test, dune test, zig build test,
 *   or a script named test, tests, run_tests or run-tests (with .sh/.py).
 * `sh -c SCRIPT` (and bash, dash, zsh with option clusters ending in c)
 * is looked into. Quotes are honoured when splitting words. */
#ifndef SG_TESTRULE_H
#define SG_TESTRULE_H

#include <stdbool.h>

bool sg_testrule_is_test_line(const char *line);
bool sg_testrule_is_test_argv(char *const *argv);

#endif
