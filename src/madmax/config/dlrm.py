"""Deep learning recommendation models (DLRM, DCNv2): dense MLPs around large embedding tables.

A sample has `num_dense_features` continuous inputs, fed to the bottom MLP, and one multi-hot
categorical input per table: `pooling` row lookups on average, summed into one pooled vector of the
table's width (an embedding bag). The interaction joins the bottom MLP output with the pooled vectors;
the top MLP turns the result into the click logit (Naumov et al. 2019, arXiv 1906.00091; DCNv2: Wang
et al. 2021, arXiv 2008.13535). Parameter counts are computed (`madmax.workload.dlrm.param_counts`).
"""

from __future__ import annotations

from enum import StrEnum
from math import comb
from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from madmax.config.base import DType, Schema, dtype_among
from madmax.config.checks import MAX_TABLES


class Interaction(StrEnum):
    """How the bottom MLP output and the pooled embeddings meet.

    DOT: pairwise dot products of the F+1 vectors (bottom output and F pooled embeddings, all of width
    d), without self-products, concatenated to the bottom output: d + C(F+1, 2) features
    (torchrec InteractionArch; facebookresearch/dlrm `arch_interaction_itself=False`).
    DCNV2: the concatenation of the F+1 vectors, N = d0 + sum of widths, through cross layers
    x_{l+1} = x_0 * (U_l (V_l x_l) + b_l) + x_l (low rank r) or x_0 * (W_l x_l + b_l) + x_l (full
    rank); N features (torchrec InteractionDCNArch, LowRankCrossNet).
    NONE: no interaction op: the top MLP reads the bottom MLP output; the pooled embeddings are looked up,
    exchanged and updated but join no FLOPs. It reproduces the proxies of the MAD-Max reference
    (DLRM-A/F/I), which give only MLP depths and one width.
    """

    DOT = "dot"
    DCNV2 = "dcnv2"
    NONE = "none"


EMBEDDING_DTYPES = (DType.FP32, DType.FP16, DType.BF16)


class EmbeddingTable(Schema):
    """`count` identical embedding tables (an embedding bag each) of `rows` x `dim`."""

    rows: PositiveInt = Field(description="Rows (hash buckets / vocabulary) of one table.")
    dim: PositiveInt = Field(description="Width of one row and of the pooled output (elements).")
    pooling: PositiveFloat = Field(
        1.0, description="Average lookups per sample (multi-hot size); 1 for one-hot features."
    )
    count: PositiveInt = Field(1, description="How many identical tables this entry stands for.")
    sharding: Literal["tw", "rw", "cw", "twrw", "dp", "hybrid"] | None = Field(
        None, description="How these tables are sharded (tw, rw, cw, twrw, dp, hybrid); default the strategy's emb.")
    zipf: float = Field(
        0.0, ge=0, allow_inf_nan=False,
        description="Access skew s of the rows: the k-th most frequent takes k^-s / H(rows, s) of the lookups "
                    "(Zipf); 0: uniform. Decides which rows emb=hybrid replicates.")

    @property
    def params(self) -> int:
        """Elements of the `count` tables: rows * dim * count."""
        return self.rows * self.dim * self.count


class DLRMModel(Schema):
    """A DLRM: bottom MLP on dense features, embedding bags on sparse ones, an interaction, a top MLP.

    Widths are element counts; MLP layers carry biases. `top_mlp[-1]` is the output (1 logit for CTR).
    """

    family: Literal["dlrm"] = Field("dlrm", description="Model family.")
    name: str = Field(description="Catalog name, e.g. 'dlrm-dcnv2'.")
    aliases: list[str] = Field(default_factory=list, description="Other names.")
    num_dense_features: PositiveInt = Field(description="Continuous input features per sample (elements).")
    bottom_mlp: list[PositiveInt] = Field(min_length=1, description="Bottom MLP layer widths (elements).")
    top_mlp: list[PositiveInt] = Field(
        min_length=1, description="Top MLP layer widths (elements); the last is the output, usually 1."
    )
    tables: list[EmbeddingTable] = Field(min_length=1, description="Embedding tables, grouped by shape.")
    interaction: Interaction = Field(Interaction.DOT, description="Feature interaction: dot, dcnv2 or none.")
    num_cross_layers: PositiveInt | None = Field(None, description="DCNv2 cross layers (dcnv2 only).")
    low_rank: PositiveInt | None = Field(
        None, description="Rank r of the DCNv2 cross matrices U (N x r), V (r x N); none: full N x N (dcnv2)."
    )
    embedding_dtype: DType = Field(DType.FP32, description="Format of the table elements: fp32, fp16 or bf16.")
    source: str = Field("", description="Where the architecture numbers come from.")

    @field_validator("embedding_dtype", mode="before")
    @classmethod
    def _embedding_dtype(cls, value: object) -> object:
        return dtype_among(value, EMBEDDING_DTYPES, "an embedding")

    @model_validator(mode="after")
    def _shape(self) -> DLRMModel:
        d = self.bottom_mlp[-1]
        if self.interaction is Interaction.DOT:
            widths = sorted({t.dim for t in self.tables})
            if widths != [d]:
                raise ValueError(f"dot interaction needs every table dim equal to bottom_mlp[-1]={d}, got {widths}")
        if self.interaction is Interaction.DCNV2:
            if self.num_cross_layers is None:
                raise ValueError("interaction 'dcnv2' needs num_cross_layers")
        else:
            for name in ("num_cross_layers", "low_rank"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} applies only to interaction 'dcnv2', not {self.interaction.value!r}")
        return self

    @model_validator(mode="after")
    def _table_count(self) -> DLRMModel:
        if self.num_tables > MAX_TABLES:
            raise ValueError(f"has {self.num_tables:,} tables (the sum of their counts); the placement and the "
                             f"workload hold each table, and at most {MAX_TABLES:,} are simulated; allowed: "
                             f"counts summing to at most {MAX_TABLES:,}")
        return self

    @property
    def num_tables(self) -> int:
        """Tables F (each entry counts `count` times)."""
        return sum(t.count for t in self.tables)

    @property
    def embedding_params(self) -> int:
        """Sum over tables of rows * dim * count."""
        return sum(t.params for t in self.tables)

    @property
    def pooled_width(self) -> int:
        """Elements of all pooled embeddings of one sample: sum of dim * count."""
        return sum(t.dim * t.count for t in self.tables)

    @property
    def interaction_width(self) -> int:
        """Input width of the top MLP: dot d + C(F+1, 2); dcnv2 N = d + pooled width; none d."""
        d = self.bottom_mlp[-1]
        if self.interaction is Interaction.DOT:
            return d + comb(self.num_tables + 1, 2)
        if self.interaction is Interaction.DCNV2:
            return d + self.pooled_width
        return d

    @property
    def default_seq_len(self) -> int:
        """A sample is one 'token': recommendation models have no sequence axis."""
        return 1

    max_seq_len = default_seq_len

    @property
    def sample_name(self) -> str:
        """What one element of the batch is: a sample (one row of features; it has no tokens)."""
        return "sample"

    def parallel_constraints(self) -> dict[str, list[tuple[str, int]]]:
        """Model sizes each parallel degree must divide: none for the MLPs of a DLRM."""
        return {}

    def degree_limits(self) -> dict[str, tuple[int, str]]:
        """Largest degree of each axis this family is modelled for, with the reason."""
        why = "a DLRM has no layer stack to pipeline and no sequence to split"
        return {"pp": (1, why), "cp": (1, why)}

    @property
    def has_experts(self) -> bool:
        return False

    @property
    def num_pipeline_units(self) -> int:
        return 1
