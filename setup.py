"""Build script: compiles every csrc/quorumlog/**/*.pyx into quorumlog.<name> extensions.

QUORUMLOG_DEBUG=1 builds with boundscheck/wraparound on, linetrace, -O0 -g and writes
`cython -a` HTML next to the sources; the default build is optimised (-O3, checks off).
"""
import os
import pathlib
import sys

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

from Cython.Build import cythonize
import numpy

HERE = pathlib.Path(__file__).parent.resolve()
CSRC = pathlib.Path("csrc")
DEBUG = os.environ.get("QUORUMLOG_DEBUG", "") not in ("", "0")

sys.path.insert(0, str(HERE / "spark"))  # spark/build_jar.py: javac against pyspark's jars

if DEBUG:
    compile_args = ["-O0", "-g3", "-msse4.2"]
    macros = [("CYTHON_TRACE", "1"), ("CYTHON_TRACE_NOGIL", "1"), ("QL_DEBUG", "1")]
    directives = {"boundscheck": True, "wraparound": True, "initializedcheck": True,
                  "linetrace": True, "profile": True, "binding": True}
else:
    compile_args = ["-O3", "-msse4.2", "-fno-strict-aliasing"]
    macros = []
    directives = {"boundscheck": False, "wraparound": False, "initializedcheck": False,
                  "cdivision": True}
# The SSE4.2 flag only enables the intrinsics; crc32c.c checks cpuid at run time and falls
# back to the portable table code on CPUs without SSE4.2.
import platform
if platform.machine() not in ("x86_64", "AMD64"):
    compile_args = [a for a in compile_args if a != "-msse4.2"]

directives.update({"language_level": "3", "embedsignature": True})


def extensions():
    exts = []
    for pyx in sorted(CSRC.glob("quorumlog/**/*.pyx")):
        rel = pyx.relative_to(CSRC).with_suffix("")
        name = ".".join(rel.parts)
        sources = [str(pyx)]
        # Every extension that cimports the CRC links the C implementation in directly,
        # so it is callable without the GIL and without a cross-module function pointer.
        sources.append(str(CSRC / "quorumlog" / "crc32c.c"))
        exts.append(Extension(
            name, sources,
            include_dirs=[str(CSRC / "quorumlog"), numpy.get_include()],
            define_macros=macros + [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=compile_args,
            extra_link_args=["-g"] if DEBUG else [],
        ))
    return cythonize(exts, compiler_directives=directives, annotate=DEBUG,
                     include_path=[str(CSRC)], build_dir="build/cython")


class BuildPyWithJar(build_py):
    """Also compiles the Spark InputFormat jar (spark/) when javac is available."""

    def run(self):
        super().run()
        try:
            import build_jar  # spark/build_jar.py
        except ImportError:
            return
        for target in {pathlib.Path(self.build_lib) / "quorumlog", HERE / "src" / "quorumlog"}:
            build_jar.build_into(target)


setup(ext_modules=extensions(), cmdclass={"build_py": BuildPyWithJar})
