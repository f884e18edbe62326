// Package procgroup runs an operator's program (a script signer, a notify
// script) in a process group of its own where the system has them, so
// that a timeout or the end of a run kills what the program started too,
// not only the program. On systems without process groups (Windows) only
// the program itself is killed; the plugin still builds and runs there.
package procgroup
