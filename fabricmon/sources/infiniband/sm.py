"""sm: the subnet manager, every 30 s. `sminfo` asks the SM the local port knows as master
(its GUID, LID, priority, state and activity count); when one answers, `saquery -s` lists every
port that claims to be an SM and `sminfo <lid>` reads each of the others, so a second master
shows. With no SM answering sminfo prints `iberror: failed: query` and exits 255: that is data
(no master), not a failure of the source."""

from __future__ import annotations

import os

from fabricmon.host.io import HostIO
from fabricmon.model.fabric import SmData
from fabricmon.parsers.errors import ParseError
from fabricmon.parsers.sminfo import no_sm_answered, parse_saquery_sm_lids, parse_sminfo
from fabricmon.pipeline.source import Inputs, Source, SourceOutput, command_error, register
from fabricmon.sources.infiniband.settings import SCOPE, FabricScope

MAX_SMS = 8          # SM ports read beyond the master (a subnet has a handful)


@register("sm", enabled=True, interval=30.0, timeout=10.0, command=("sminfo",),
          collector="infiniband", concurrency=4, records=SmData, options=SCOPE)
class SmSource(Source):
    def collect(self, io: HostIO, inputs: Inputs) -> SourceOutput:
        out = SourceOutput()
        cmd = list(self.sc.command)
        t = ["-t", str(self.sc.settings(FabricScope).mad.timeout_ms)]
        res = io.run([*cmd, *t], inputs.remaining(self.sc.timeout))
        text = res.stdout + "\n" + res.stderr
        if res.error is None and no_sm_answered(text):
            # asked once more before "no master" is data: one query lost on a busy port is not an SM gone
            res = io.run([*cmd, *t], inputs.remaining(self.sc.timeout))
            text = res.stdout + "\n" + res.stderr
        if res.error is None and no_sm_answered(text):
            out.data = SmData(answered=False)
            return out
        master = out.parsed(res, parse_sminfo)
        if master is None:
            return out
        data = SmData(sms=[master], answered=True)
        # Every other port that claims to be an SM (a second master is a split subnet).
        sa_prog = os.path.join(os.path.dirname(cmd[0]), "saquery") if os.sep in cmd[0] else "saquery"
        sa = io.run([sa_prog, "-s", *t], inputs.remaining(self.sc.timeout))
        if (sa_error := command_error(sa)) is None:
            lids = [lid for lid in parse_saquery_sm_lids(sa.stdout) if lid != master.lid][:MAX_SMS]
            results = list(self.pool().map(
                lambda lid: io.run([*cmd, *t, str(lid)], inputs.remaining(self.sc.timeout)), lids))
            for lid, r in zip(lids, results):
                try:
                    data.sms.append(parse_sminfo(r.stdout))
                except ParseError:
                    out.error("read", f"sminfo {lid}: no answer from the SM port at lid {lid}")
        else:
            out.error(*sa_error)
        out.data = data
        return out
