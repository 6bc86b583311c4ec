"""`magrpo-trust DIR [DIR ...]`: trust the code a run or team directory records (the rule and its
store: magrpo.core.trust).

    magrpo-trust outputs/train/<run>          # trust what the run records now
    magrpo-trust --show exported_team         # what it records and whether it is trusted
    magrpo-trust --revoke exported_team       # forget that trust
    magrpo-trust --list                       # every directory you trust
    magrpo-trust --adopt results/<run>        # a run or team you made and moved: sign it as yours again
"""

from __future__ import annotations

import argparse
import sys

from magrpo.core.plugins import PluginError
from magrpo.core.schema import ConfigError
from magrpo.core.trust import STORE_FILE, adopt, describe, home, needs_trust, revoke, trust, trusted_dirs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="magrpo-trust", description=(
        "Trust the code a run or team directory records (its plugins, reward functions, config "
        "directories), so that magrpo-eval, resume=, magrpo-export, magrpo-crossplay, magrpo-table and "
        "Team.from_pretrained import it. Directories you made yourself need no trusting; one someone "
        f"else made does. Your trust store: {home() / STORE_FILE}."))
    p.add_argument("dirs", nargs="*", metavar="DIR", help="run, checkpoint or team directories to trust")
    p.add_argument("--show", action="store_true", help="show what each DIR records and whether it is trusted; change nothing")
    p.add_argument("--revoke", action="store_true", help="forget the trust given to each DIR")
    p.add_argument("--list", action="store_true", help="list the directories you trust")
    p.add_argument("--adopt", action="store_true",
                   help="sign each DIR as made by you, where it is now: one you made and then moved, or made "
                        "before signatures bound the whole directory. Its code and the keys that choose where "
                        "data goes or what is read (URLs, paths) are then taken up as yours; never adopt a "
                        "directory someone else made")
    args = p.parse_args(argv)
    if args.list:
        for where, codes in trusted_dirs().items():
            print(f"{where}: {', '.join(codes) or 'no code references'}")
        return 0
    if not args.dirs:
        p.error("give at least one DIR (or --list)")
    for d in args.dirs:
        try:
            if args.show:
                print(f"{d}:")
                print("\n".join(describe(d)))
            elif args.revoke:
                print(f"magrpo-trust: {'revoked' if revoke(d) else 'was not trusted:'} {d}")
            elif args.adopt:
                refs = adopt(d)
                listed = ", ".join(dict.fromkeys(r.name for r in refs if needs_trust(r))) or "no code references"
                print(f"magrpo-trust: signed {d} as made by you: {listed}, and its reach keys")
            else:
                refs = trust(d)
                listed = ", ".join(dict.fromkeys(r.name for r in refs if needs_trust(r))) or "no code references"
                print(f"magrpo-trust: trusted {d}: {listed}")
        except (ConfigError, PluginError) as e:
            print(f"magrpo-trust: error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
