"""The `pex` tool Pants runs here: pex's own command line, with `--no-compress` first.

Pants 2.17 has no option to pass flags to the pex tool, and pex compresses the zips inside every
PEX it builds by default. For the requirements PEXes of this workspace that is most of the build:
packing torch's wheel took 55 s on 2 cores, 22 s with `--no-compress` (pex's help: "Uncompressed
PEX files are much faster to create from an empty cache"); mindspore's wheel is four times
torch's. These PEXes never leave the machine (Pants' local store and its remote cache keep them),
so their size on disk matters less than a newcomer's first run. `./pants` builds the tool with
this module as its entry point (`pex pex==2.1.137 -D 3rdparty/pex -e meshtest_pex:main`); the
pex3 commands Pants runs (`PEX_SCRIPT=pex3`: lock files) bypass it, and a flag given later on
the command line (`--compress`) still wins.
"""
import sys

from pex.bin.pex import main as pex_main


def main() -> None:
    sys.argv[1:1] = ["--no-compress"]
    pex_main()
