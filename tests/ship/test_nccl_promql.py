"""docs/nccl.md's PromQL join of an NCCL measure (node daemon) to the fabric collector's switch port,
evaluated by a real Prometheus engine (`promtool test rules`) on series shaped as both export them."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml
from helpers import REPO, promtool


def doc_query() -> str:
    text = (REPO / "docs" / "nccl.md").read_text()
    return re.search(r"```promql\n(.*?)```", text, re.S).group(1)


def test_the_documented_join_names_the_cabled_switch_port(tmp_path: Path) -> None:
    nccl = ('fabricmon_nccl_line_rate_ratio{job_id="4242",comm="DP Group 0",operation="AllReduce",'
            'message_size="4-5GB",algo_proto="RING_SIMPLE",n_nodes="4",gpu="0",uuid="GPU-5a3e",device="mlx5_0",'
            'port="1",node_guid="0xa088c20398b16e14",switch="leaf03",switch_port="17"}')
    other = nccl.replace('gpu="0"', 'gpu="1"').replace("mlx5_0", "mlx5_1").replace("0xa088c20398b16e14",
                                                                                  "0xa088c20347b9ac93")
    links = [('fabricmon_fabric_link_info{switch_guid="0000000000200002",port="17",role="host",'
              'remote_guid="a088c20398b16e14",remote_port="1",remote_name="node01 mlx5_0"}'),
             ('fabricmon_fabric_link_info{switch_guid="0000000000200003",port="18",role="host",'
              'remote_guid="a088c20347b9ac93",remote_port="1",remote_name="node01 mlx5_1"}'),
             ('fabricmon_fabric_link_info{switch_guid="0000000000200002",port="33",role="up",'
              'remote_guid="0000000000300001",remote_port="5",remote_name="spine01"}')]
    out_labels = {"job_id": "4242", "comm": "DP Group 0", "operation": "AllReduce", "message_size": "4-5GB",
                  "algo_proto": "RING_SIMPLE", "n_nodes": "4", "uuid": "GPU-5a3e", "port": "1", "switch": "leaf03",
                  "switch_port": "17"}
    tests = {"rule_files": [], "evaluation_interval": "30s", "tests": [{
        "interval": "30s",
        "input_series": [{"series": nccl, "values": "0.8x4"}, {"series": other, "values": "0.5x4"}]
        + [{"series": s, "values": "1x4"} for s in links],
        "promql_expr_test": [{"expr": doc_query(), "eval_time": "1m", "exp_samples": [
            {"labels": "{" + ",".join(f'{k}="{v}"' for k, v in {
                **out_labels, "gpu": "0", "device": "mlx5_0", "node_guid": "0xa088c20398b16e14",
                "switch_guid": "0000000000200002", "switch_port_fabric": "17"}.items()) + "}", "value": 0.8},
            {"labels": "{" + ",".join(f'{k}="{v}"' for k, v in {
                **out_labels, "gpu": "1", "device": "mlx5_1", "node_guid": "0xa088c20347b9ac93",
                "switch_guid": "0000000000200003", "switch_port_fabric": "18"}.items()) + "}", "value": 0.5},
        ]}],
    }]}
    f = tmp_path / "nccl_join_test.yml"
    f.write_text(yaml.safe_dump(tests, sort_keys=False))
    res = subprocess.run([promtool(), "test", "rules", str(f)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
