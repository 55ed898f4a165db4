"""An agy session's own directory (seed 003): the plugin agy loads from ``--add-dir``, and
the images attached to the session's messages.

agy has no flag for a system prompt, MCP servers or hooks, so a session hands them over
as the plugin ``.agents/plugins/agentproto/`` in a fresh 0700 directory of the sidecar's
private area (agentproto/loopio/private.py): ``plugin.json``, ``rules/AGENTS.md`` (the
instructions), ``rules/notes.md`` (the notes, always on), ``mcp_config.json`` and
``hooks.json``. agy takes only text blocks in a message, so an attached image is saved
under ``images/`` and named in a text block.

Rules of this file:
- Every file is new and 0600 (``private.write_private``): ``mcp_config.json`` holds header
  and env values and the listener's tools URL, the hooks' curl configs its hook URLs, and
  each URL holds the session's token. The token is in no command line and no log.
- What agy would take silently but wrongly is refused before anything is written: a rules
  file past agy's limit (``InvalidConfiguration``), an MCP transport it lacks, hooks with
  no curl to post them (``UnsupportedFeature``).
- Only small local file operations, at open and per attachment (an attachment that is not
  a regular file is refused without blocking: a FIFO never stalls the loop).
"""

from __future__ import annotations

import json
import mimetypes
import os
import re
import shutil
import stat
from collections.abc import Callable

from agentproto.core.errors import AgentError, Kind
from agentproto.drivers.agy.mapping import (
    HOOK_MARGIN,
    NOTES_FRONT_MATTER,
    PLUGIN,
    curl_config,
    file_note,
    hooks_config,
    image_note,
    mcp_config,
    rules_file,
    shell_quote,
    unreadable_note,
)
from agentproto.drivers.base import Launch
from agentproto.loopio import private

#: The largest attached image saved for agy to view.
MAX_IMAGE = 32 * 1024 * 1024


class SessionDir:
    """One session's directory: checked at construction, made by ``create``, gone at ``remove``."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.path: str | None = None
        self.images = 0
        mcp_config(launch.mcp_servers, None)  # a transport agy lacks is refused here
        self.rules: list[tuple[str, bytes]] = []
        if launch.instructions:
            self.rules.append(("AGENTS.md", rules_file("instructions", launch.instructions)))
        if launch.notes:
            self.rules.append(("notes.md", rules_file("notes", launch.notes, NOTES_FRONT_MATTER)))
        self.curl = shutil.which("curl", path=launch.child_env().get("PATH")) if launch.hooks else None
        if launch.hooks and self.curl is None:
            why = "hooks: agy's hooks post to agentproto through curl, which is not on PATH"
            raise AgentError.detail(Kind.UNSUPPORTED_FEATURE, why)

    def create(self, tools_url: str | None, hook_url: Callable[[str], "str | None"]) -> str:
        """Make the directory and its plugin; its path (removed again if anything fails)."""
        self.path = private.session_dir("agy")
        try:
            self._write_plugin(self.path, tools_url, hook_url)
        except BaseException:
            self.remove()
            raise
        return self.path

    def _write_plugin(self, path: str, tools_url: str | None, hook_url: Callable[[str], "str | None"]) -> None:
        launch = self.launch
        root = os.path.join(path, ".agents", "plugins", PLUGIN)
        os.makedirs(os.path.join(root, "rules"), mode=0o700)
        private.write_private(os.path.join(root, "plugin.json"), json.dumps({"name": PLUGIN}))
        for name, data in self.rules:
            private.write_private(os.path.join(root, "rules", name), data)
        servers = mcp_config(launch.mcp_servers, tools_url)
        if servers["mcpServers"]:
            private.write_private(os.path.join(root, "mcp_config.json"), json.dumps(servers, indent=2))
        commands: dict[str, str] = {}
        timeout = launch.hook_timeout + HOOK_MARGIN
        for event in launch.hooks:
            url = hook_url(event)
            if url is None or self.curl is None:
                continue
            if not commands:
                os.mkdir(os.path.join(root, "hooks"), 0o700)
            config = os.path.join(root, "hooks", f"{event}.curl")
            private.write_private(config, curl_config(url, timeout))
            # curl reads the URL from the file: /proc/PID/cmdline shows only the path.
            commands[event] = f"{shell_quote(self.curl)} -K {shell_quote(config)}"
        if commands:
            private.write_private(os.path.join(root, "hooks.json"), json.dumps(hooks_config(commands, timeout)))

    def remove(self) -> None:
        private.remove_tree(self.path)
        self.path = None

    def attach(self, attachments: list[str]) -> list[str]:
        """A text block per attachment: images saved under images/ (agy rejects image
        blocks and views files), other files named by their path."""
        notes = []
        for path in attachments:
            full = os.path.abspath(os.path.join(self.launch.dir, path))
            if not (mimetypes.guess_type(full)[0] or "").startswith("image/"):
                notes.append(file_note(full))
                continue
            try:
                notes.append(image_note(full, self._save_image(full)))
            except OSError as exc:
                notes.append(unreadable_note(full, exc.strerror or str(exc)))
        return notes

    def _save_image(self, path: str) -> str:
        if self.path is None:
            raise private.UnsafePath("the session has no directory")
        too_big = f"it is larger than {MAX_IMAGE:,} bytes"
        private.check_confined(path, "attachment")  # replay reads nothing outside its own
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise private.UnsafePath("it is not a regular file")
            if info.st_size > MAX_IMAGE:
                raise private.UnsafePath(too_big)
            chunks, size = [], 0
            while size <= MAX_IMAGE:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(fd)
        if size > MAX_IMAGE:  # it grew since the fstat
            raise private.UnsafePath(too_big)
        images = os.path.join(self.path, "images")
        if self.images == 0:
            os.makedirs(images, mode=0o700, exist_ok=True)
        self.images += 1
        name = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(path))[-100:]
        target = os.path.join(images, f"{self.images}-{name}")
        private.write_private(target, b"".join(chunks))
        return target
