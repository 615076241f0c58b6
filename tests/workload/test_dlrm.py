"""DLRM and DCNv2 workloads: parameters, FLOPs and saved activations computed by hand."""

import pytest

from madmax.config.dlrm import DLRMModel
from madmax.config.loaders import load_model, validate
from madmax.config.task import Task
from madmax.errors import ConfigError
from madmax.workload import build_workload, param_counts
from madmax.workload.ops import OpKind

# 2 dense features; bottom 2->8->4; 3 tables of dim 4 (rows 10, 20, 30 x2); dot; top 10->6->1.
TINY = DLRMModel(name="tiny", num_dense_features=2, bottom_mlp=[8, 4], top_mlp=[6, 1],
                 tables=[{"rows": 10, "dim": 4, "pooling": 2}, {"rows": 30, "dim": 4, "pooling": 5, "count": 2}])


def total(name: str) -> int:
    return sum(param_counts(load_model(name)).values())


def test_dlrm_a_total_801_17_b():
    # MAD-Max reference DLRM-A (model_configs.csv): tables 4096 x 2,080,000 x 94 = 800,849,920,000
    # bottom 3994 -> 10 x 3994 with biases: 10 x (3994^2 + 3994) = 159,560,300
    # top 10 x (3994^2 + 3994) + logit (3994 + 1) = 159,564,295      -> 801,169,044,595 = 801.17 B
    counts = param_counts(load_model("dlrm-a"))
    assert counts == {"embedding": 800_849_920_000, "bottom_mlp": 159_560_300, "interaction": 0,
                      "top_mlp": 159_564_295}
    assert sum(counts.values()) == pytest.approx(801.17e9, rel=1e-4)


def test_dlrm_dcnv2_total_by_hand():
    # MLPerf DLRM-DCNv2: rows 40M x 5 + 39060 + 17295 + 7424 + 20265 + 3 + 7122 + 1543 + 63 + 3067956 + 405282
    #   + 10 + 2209 + 11938 + 155 + 4 + 976 + 14 + 590152 + 12973 + 108 + 36 = 204,184,588; x 128 = 26,135,627,264
    # bottom 13*512+512 + 512*256+256 + 256*128+128 = 171,392
    # cross: N = 27 * 128 = 3456; 3 x (2 * 3456 * 512 + 3456) = 10,627,200
    # top 3456*1024+1024 + 1024*1024+1024 + 1024*512+512 + 512*256+256 + 256*1+1 = 5,245,953
    counts = param_counts(load_model("dlrm-dcnv2"))
    assert counts == {"embedding": 26_135_627_264, "bottom_mlp": 171_392, "interaction": 10_627_200,
                      "top_mlp": 5_245_953}
    assert sum(counts.values()) == 26_151_671_809


def test_dlrm_mlperf_v1_total_by_hand():
    # 187,767,399 rows x 128 = 24,034,227,072; bottom 171,392; dot: top input 128 + C(27, 2) = 479
    # (facebookresearch/dlrm ln_top 479-1024-...): 479*1024+1024 + 1,049,600 + 524,800 + 131,328 + 257 = 2,197,505
    model = load_model("dlrm-mlperf-v1")
    assert model.interaction_width == 479
    assert total("dlrm-mlperf-v1") == 24_034_227_072 + 171_392 + 2_197_505


def test_reference_proxies():
    # 64 x 732e6 x 256 = 11,993,088,000,000 (the 12 T model); 512 x 7.05e6 x 92 = 332,083,200,000
    assert param_counts(load_model("dlrm-f"))["embedding"] == 11_993_088_000_000
    assert param_counts(load_model("dlrm-i"))["embedding"] == 332_083_200_000
    assert load_model("DLRM_A").name == "dlrm-a"  # the reference's spelling resolves


def test_tiny_params_by_hand():
    # bottom 2*8+8 + 8*4+4 = 60; top input 4 + C(4, 2) = 10: 10*6+6 + 6*1+1 = 73; tables 10*4 + 2*30*4 = 280
    assert TINY.num_tables == 3
    assert TINY.interaction_width == 10
    assert param_counts(TINY) == {"embedding": 280, "bottom_mlp": 60, "interaction": 0, "top_mlp": 73}


def test_tiny_forward_flops_by_hand():
    # GEMMs per sample: bottom 2*(2*8 + 8*4) = 96; top 2*(10*6 + 6*1) = 132. The dot Z = X X^T on X of
    # 4 x 4, 2 * 4^2 * 4 = 128 FLOPs, is a memory-bound batched product (4 x 4 read, 4 x 4 written).
    # Embedding bags add pooling * dim: 2*4 + 2*(5*4) = 48.
    w = build_workload(TINY, Task(kind="pretrain"))
    gemm = sum(op.forward_flops(1, 1) for b in w.blocks for op in b.ops if op.kind is OpKind.GEMM)
    assert gemm == 96 + 132
    dot = next(op for b in w.blocks for op in b.ops if op.name == "interaction.dot")
    assert (dot.kind, dot.forward_flops(1, 1), dot.moved_elems_per_token) == (OpKind.ELEMENTWISE, 128, 16 + 16)
    emb = [op for op in w.blocks[0].ops]
    assert [op.kind for op in emb] == [OpKind.EMBEDDING, OpKind.EMBEDDING]  # a gather, not a GEMM
    assert sum(op.flops_per_token for op in emb) == 48
    # moved elements: pooling * dim read + dim written, per table: (2+1)*4 + 2*(5+1)*4 = 60
    assert sum(op.moved_elems_per_token for op in emb) == 60
    assert [b.name for b in w.blocks] == ["embedding", "bottom_mlp", "interaction", "top_mlp"]
    assert w.total_params == 280 + 60 + 73


def test_tiny_saved_activations_by_hand():
    # bottom GEMM inputs 2 + 8; interaction keeps X (4 x 4 = 16); top GEMM inputs 10 + 6; loss keeps 1 logit
    w = build_workload(TINY, Task(kind="pretrain"))
    saved = {b.name: sum(op.saved_elems_per_token for op in b.ops) for b in w.blocks}
    assert saved == {"embedding": 0, "bottom_mlp": 10, "interaction": 16, "top_mlp": 17}


def test_dcnv2_cross_layers_by_hand():
    # N = 4 + 3*4 = 16. Low rank 2: per layer V 16x2 + U 2x16 + bias 16 = 80, FLOPs 2*(32+32) = 128.
    # Full rank: W 16x16 + bias 16 = 272 per layer, FLOPs 2*256 = 512.
    low = validate(DLRMModel, TINY.model_dump() | {"interaction": "dcnv2", "num_cross_layers": 2, "low_rank": 2},
                   "model")
    assert low.interaction_width == 16
    assert param_counts(low)["interaction"] == 2 * 80
    inter = next(b for b in build_workload(low, Task(kind="pretrain")).blocks if b.name == "interaction")
    assert sum(op.forward_flops(1, 1) for op in inter.ops if op.kind is OpKind.GEMM) == 2 * 128
    full = validate(DLRMModel, low.model_dump() | {"low_rank": None}, "model")
    assert param_counts(full)["interaction"] == 2 * 272


def test_interaction_none_feeds_the_bottom_output():
    proxy = validate(DLRMModel, TINY.model_dump() | {"interaction": "none"}, "model")
    w = build_workload(proxy, Task(kind="pretrain"))
    assert [b.name for b in w.blocks] == ["embedding", "bottom_mlp", "top_mlp"]
    assert w.blocks[-1].ops[0].k == 4


@pytest.mark.parametrize(("change", "message"), [
    ({"tables": [{"rows": 10, "dim": 8}]}, "dot interaction needs every table dim equal to bottom_mlp[-1]=4"),
    ({"interaction": "dcnv2"}, "interaction 'dcnv2' needs num_cross_layers"),
    ({"low_rank": 4}, "low_rank applies only to interaction 'dcnv2'"),
    ({"embedding_dtype": "int8"}, "is not an embedding dtype"),
    ({"top_mlp": []}, "top_mlp"),
    ({"tables": [{"rows": 0, "dim": 4}]}, "rows"),
])
def test_bad_models_are_config_errors(change, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        validate(DLRMModel, TINY.model_dump() | change, "model")


def test_decoder_notions_are_rejected():
    with pytest.raises(ConfigError, match=r"task\.finetune='lora'"):
        build_workload(TINY, Task(kind="finetune", finetune="lora"))
    with pytest.raises(ConfigError, match=r"task\.seq_len=128"):
        build_workload(TINY, Task(kind="pretrain", seq_len=128))
    assert TINY.default_seq_len == 1
