// Package docs holds no code: its tests check the project's documentation
// against the repository (links, paths, the Makefile's targets, the README's
// opening commands), so that the docs a user follows cannot drift from
// what is shipped.
package docs
