"""Compiler passes, one module each, named in kebab-case and registered through the
``backline.passes`` entry-point group (see :mod:`backline_compiler.passes.plugin`)."""
