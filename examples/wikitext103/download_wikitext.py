"""Get wikitext-103-v1.zip from the first mirror that gives a verified copy (prepare.sh).

    python download_wikitext.py ZIP SIZE SHA256 MIRRORS

MIRRORS: one mirror per line, its URL, then (optional) the User-Agent header to send it, e.g.
``https://wikitext.smerity.com/wikitext-103-v1.zip Mozilla/5.0 ...`` (that host answers 403 to Python's
default User-Agent). An existing ZIP that verifies is used as it is. Otherwise each mirror in turn is
downloaded to ZIP.part while its size and SHA-256 are computed; a copy that does not verify (SIZE or
SHA256 empty: that check is skipped) is deleted and the next mirror is tried; the first that verifies is
renamed to ZIP. If none does, the exit status is 1 and the error names every mirror with what went wrong,
and the ways to get the file by hand. Needs only the standard library.
"""

import hashlib
import os
import sys
import urllib.request

CHUNK = 1 << 20


def mirrors(text):
    """``[(url, user agent or None)]`` of the MIRRORS text."""
    found = []
    for line in text.splitlines():
        if line.strip():
            url, _, agent = line.strip().partition(" ")
            found.append((url, agent.strip() or None))
    return found


def mismatch(size, sha256, expected_size, expected_sha256):
    """Why a file of ``size`` bytes and digest ``sha256`` is not the expected one (None: it is)."""
    if expected_size and size != int(expected_size):
        return (f"{size} bytes, expected EXPECTED_SIZE={expected_size}"
                + (" (truncated download?)" if size < int(expected_size) else ""))
    if expected_sha256 and sha256 != expected_sha256:
        return f"SHA-256 {sha256}, expected EXPECTED_SHA256={expected_sha256}"
    return None


def copy_hashing(source, path):
    """Copy the stream ``source`` to ``path``: (bytes, SHA-256)."""
    digest, size = hashlib.sha256(), 0
    with open(path, "wb") as out:
        for block in iter(lambda: source.read(CHUNK), b""):
            out.write(block)
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def download(url, agent, path):
    headers = {"User-Agent": agent} if agent else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=120) as response:
        return copy_hashing(response, path)


def main(zip_path, expected_size, expected_sha256, mirror_text):
    if os.path.exists(zip_path):
        with open(zip_path, "rb") as f:
            problem = mismatch(*copy_hashing(f, os.devnull), expected_size, expected_sha256)
        if problem is None:
            print(f"== using the verified {zip_path}", flush=True)
            return 0
        print(f"== discarding {zip_path} ({problem})", flush=True)
        os.remove(zip_path)
    tried = []
    for url, agent in mirrors(mirror_text):
        print(f"== downloading {url}" + (f" (User-Agent: {agent})" if agent else ""), flush=True)
        part = zip_path + ".part"
        try:
            problem = mismatch(*download(url, agent, part), expected_size, expected_sha256)
            if problem is not None:
                problem = f"does not verify: {problem}"
        except Exception as error:  # HTTP errors, refused connections, missing files: try the next mirror
            problem = f"download failed: {error}"
        if problem is None:
            os.replace(part, zip_path)
            print(f"== verified {zip_path} from {url}", flush=True)
            return 0
        if os.path.exists(part):
            os.remove(part)
        print(f"prepare.sh: {url}: {problem}", file=sys.stderr, flush=True)
        tried.append(f"{url}: {problem}")
    print("prepare.sh: error: no mirror gave a verified wikitext-103-v1.zip. Tried, in order: " + "; ".join(tried)
          + f". By hand: download wikitext-103-v1.zip (e.g. in a browser), put it at {zip_path} and rerun (it is "
          f"verified before use), or unzip it and run prepare.sh with WIKITEXT_DIR=<its wikitext-103 folder>; or "
          f"set MIRRORS.", file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
