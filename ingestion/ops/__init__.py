"""What operators run: onboard, status, history, verify, replay, rewind, quarantine, report, catalog. Imports
`stream` and everything below it; never `dev` or `cli`."""
