"""heed's version, in the one module every other reads it from (heed.__version__ is this): the
package's root imports heed.api lazily for heed.load, so a module under it that imported the root
for the version would close an import cycle."""
__version__ = "0.1.0"
