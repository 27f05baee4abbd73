"""Caffe2's gradient status of every one of its 550 operator types, as netgrad's own table.

Source: the registrations in Caffe2's operator sources (``REGISTER_GRADIENT``,
``NO_GRADIENT``, ``SHOULD_NOT_DO_GRADIENT``, ``GRADIENT_NOT_IMPLEMENTED_YET``; spec §2.3).
The facts are Caffe2's; the table is netgrad's, so the service never reads shared files at
run time.

:func:`apply_caffe2_statuses` runs once, at the end of :func:`core.ops.load_all`, after every
op module and control-op module has registered its makers. It gives each table type that
netgrad did not register a status of its own Caffe2's status, and a type that Caffe2
differentiates but that has no netgrad maker the status ``not_implemented_in_netgrad``. So
"differentiable" is derived from the makers actually registered at load time, not from a
list kept here: a module that adds a maker changes the answer by itself.

A type in none of these lists (and registered by no module) is not a Caffe2 op as far as
netgrad knows: the registry answers it with "unknown operator" and the nearest known names.
"""

from __future__ import annotations

from core.registry import REGISTRY, GradientStatus, register_op

#: 248 op types: Caffe2 status ``gradient``.
_DIFFERENTIATED = """
Abs Acos Add AddPadding AffineChannel Alias Asin Atan AveragePool AveragePool1D
AveragePool2D AveragePool3D AveragedLoss BatchDenseToSparse BatchGather BatchMatMul
BatchMoments BatchPermutation BatchSparseToDense BatchToSpace BernoulliJSD BooleanMask
CTC Cast Cbrt ChannelShuffle Clip Col2Im ColwiseMax Concat Conv Conv1D Conv2D Conv3D
ConvTranspose Copy CopyCPUToGPU CopyGPUToCPU CopyRowsToTensor Cos Cosh
CosineEmbeddingCriterion CosineSimilarity CrossEntropy Cube DeformConv DepthConcat
DepthSplit Div Do DotProduct DotProductWithPadding Dropout ELU ElementwiseLinear Elu
EnsureDense Erf Exp Expand ExpandDims FC FCTransposed FC_Decomp FC_Prune Flatten
FlattenToVec FlexibleTopK FloatToHalf FunHash GRUUnit Gather GatherByKey Gelu GroupNorm
GroupSpatialSoftmax HSoftmax HalfToFloat HardSigmoid If Im2Col InstanceNorm
IntegralImage L1Distance LC LC1D LC2D LC3D LRN LSTMUnit LabelCrossEntropy LambdaRankNdcg
LayerNorm LeakyRelu LengthsMax LengthsMean LengthsSum LengthsTile LengthsTopK
LengthsWeightedSum Log Logit LpNorm LpPool MakeTwoClass MarginRankingCriterion MatMul
Max MaxPool MaxPool1D MaxPool2D MaxPool3D MaxPoolWithIndex Mean
MergeMultiListFeatureTensors MergeMultiMapFeatureTensors MergeMultiScalarFeatureTensors
MergeSingleListFeatureTensors MergeSingleMapFeatureTensors
MergeSingleScalarFeatureTensors Min Mish Moments Mul NCHW2NHWC NHWC2NCHW NanCheck
NegateGradient Negative Normalize PRelu PSRoIPool PackRNNSequence PackSegments PadImage
PairWiseLoss Pow PrependDim Python PythonDLPack QuantDecode RMSNorm Reciprocal Recurrent
RecurrentNetwork ReduceBackMax ReduceBackMean ReduceBackSum ReduceFrontMax
ReduceFrontMean ReduceFrontSum ReduceFrontWeightedSum ReduceL1 ReduceL2 ReduceMax
ReduceMean ReduceMin ReduceSum Relu ReluFp16 ReluN RemovePadding Reshape ResizeNearest
ResizeNearest3D ReversePackedSegs RoIAlign RoIAlignRotated RoIPool RoIPoolF RowMul
RowwiseMax Rsqrt SampleAs Scale SelectSmoothL1Loss Selu SequenceMask Sigmoid
SigmoidCrossEntropyLoss SigmoidCrossEntropyWithLogits SigmoidFocalLoss Sin Sinh Slice
SmoothL1Loss Softmax SoftmaxFocalLoss SoftmaxFp16 SoftmaxWithLoss Softplus Softsign
SortedSegmentMean SortedSegmentRangeLogMeanExp SortedSegmentRangeLogSumExp
SortedSegmentRangeMax SortedSegmentRangeMean SortedSegmentRangeSum SortedSegmentSum
SortedSegmentWeightedSum SpaceToBatch SparseFunHash SparseLengthsMean SparseLengthsSum
SparseLengthsWeightedSum SparseSortedSegmentMean SparseSortedSegmentSum
SparseSortedSegmentWeightedSum SparseToDense SparseToDenseMask SparseUnsortedSegmentMean
SparseUnsortedSegmentSum SparseUnsortedSegmentWeightedSum SpatialBN SpatialNarrowAs
SpatialSoftmaxWithLoss Split SplitByLengths Sqr Sqrt SquareRootDivide SquaredL2Distance
Squeeze Sub Sum SumElements Swish TTContraction TTPad TTSparseLengthsSum Tan Tanh
ThresholdedRelu Tile TopK Torch Transpose UnpackRNNSequence UnpackSegments
UnsortedSegmentMean UnsortedSegmentSum UnsortedSegmentWeightedSum UpsampleBilinear
UpsampleNearest WeightedSigmoidCrossEntropyWithLogits WeightedSum While ZeroGradient
"""

#: 125 op types: Caffe2 status ``no_gradient``.
_NO_GRADIENT = """
AtomicIter BatchBucketize BatchOneHot BisectPercentile BooleanMaskLengths BooleanUnmask
BucketBatchOneHot BucketizeOp CloseBlobsQueue CloseRebatchingQueue Conditional
ConstantFill CreateBlobsQueue CreateDB CreateRebatchingQueue CreateTextFileReader
DenseVectorToIdList DequeueBlobs DequeueRebatchingQueue DiagonalFill EnqueueBlobs
EnqueueRebatchingQueue EnsureCPUOutput FileStoreHandlerCreateOp Float16ConstantFill
Float16UniformFill FloatToFused2BitFakeRowwiseQuantized FloatToFused2BitRowwiseQuantized
FloatToFused4BitFakeRowwiseQuantized FloatToFused4BitRowwiseQuantized
FloatToFused8BitRowwiseQuantized FloatToFused8BitRowwiseQuantizedHalfScaleBias
FloatToFusedRandRowwiseQuantized FloatToRowwiseQuantized8Bits
Fused2BitRowwiseQuantizedToFloat Fused2BitRowwiseQuantizedToHalf
Fused4BitRowwiseQuantizedToFloat Fused4BitRowwiseQuantizedToHalf
Fused8BitRowwiseQuantizedHalfScaleBiasToFloat
Fused8BitRowwiseQuantizedHalfScaleBiasToHalfFloat Fused8BitRowwiseQuantizedToFloat
Fused8BitRowwiseQuantizedToHalfFloat FusedRandRowwiseQuantizedToFloat
GatherRangesToDense GaussianFill GivenTensorBoolFill GivenTensorByteStringToUInt8Fill
GivenTensorDoubleFill GivenTensorFill GivenTensorInt16Fill GivenTensorInt64Fill
GivenTensorIntFill GivenTensorStringFill HalfFloatToFused8BitRowwiseQuantized
HalfFloatToFused8BitRowwiseQuantizedHalfScaleBias HalfToFused2BitFakeRowwiseQuantized
HalfToFused2BitRowwiseQuantized HalfToFused4BitFakeRowwiseQuantized
HalfToFused4BitRowwiseQuantized ImageInput IndexGetOp InferenceLSTM IntIndexCreate Iter
KeySplitOp LearningRate LearningRateAdaption LengthsPad LengthsPartition
LengthsRangeFill Load LongIndexCreate MSRAFill MergeIdLists NGramFromCategorical OneHot
Partition Percentile Range RangeFill RedisStoreHandlerCreateOp RowWiseArgMax
Rowwise8BitQuantizedToFloat SafeDequeueBlobs SafeEnqueueBlobs SegmentOneHot Size
SparseDropoutWithReplacement SparseLengthsMean2BitRowwiseSparse
SparseLengthsMean4BitRowwiseSparse SparseLengthsMean8BitRowwiseSparse
SparseLengthsMean8BitsRowwise SparseLengthsMeanFused2BitRowwise
SparseLengthsMeanFused4BitRowwise SparseLengthsMeanFused8BitRowwise
SparseLengthsSum2BitRowwiseSparse SparseLengthsSum4BitRowwiseSparse
SparseLengthsSum8BitRowwiseSparse SparseLengthsSum8BitsRowwise
SparseLengthsSumFused2BitRowwise SparseLengthsSumFused4BitRowwise
SparseLengthsSumFused8BitRowwise SparseLengthsSumSparseLookup
SparseLengthsWeightedMean8BitsRowwise SparseLengthsWeightedSum2BitRowwiseSparse
SparseLengthsWeightedSum4BitRowwiseSparse SparseLengthsWeightedSum8BitRowwiseSparse
SparseLengthsWeightedSum8BitsRowwise SparseLengthsWeightedSumFused2BitRowwise
SparseLengthsWeightedSumFused4BitRowwise SparseLengthsWeightedSumFused8BitRowwise
StopGradient StringIndexCreate StumpFunc StumpFuncIndex SwapBestPath TensorProtosDBInput
TextFileReaderRead UniformFill UniformIntFill UniqueUniformFill VideoInput ViterbiPath
WeightedSampleDequeueBlobs XavierFill
"""

#: 172 op types: Caffe2 status ``should_not_differentiate``.
_SHOULD_NOT_DIFFERENTIATE = """
APMeter Accumulate AccumulateHistogram Accuracy Adadelta Adagrad Adam Allgather
Allreduce And Append ArgMax ArgMin AsyncNetBarrier AtomicAppend AtomicFetchAdd
BBoxTransform Barrier BitwiseAnd BitwiseOr BitwiseXor BoxWithNMSLimit Broadcast
CTCBeamSearchDecoder CTCGreedyDecoder ChannelBackpropStats ChannelStats CheckAtomicBool
CheckDatasetConsistency Checkpoint ClipTensorByScaling CloneCommonWorld
CollectAndDistributeFpnRpnProposals CollectRpnProposals CollectTensor ComputeOffset
ConcatTensorVector ConditionalSetAtomicBool CountDown CountUp CreateAtomicBool
CreateBlobsQueueDB CreateCommonWorld CreateCounter CreateMutex CreateScope
CreateTensorVector CreateTreeCursor DBExists DestroyCommonWorld DistributeFpnProposals
EQ EnforceFinite EnsureClipped Fail FeedBlob FindDuplicateElements
Float16SparseNormalize Free Ftrl GE GFtrl GT GatherRangesOp GenerateProposals
GenerateProposalsCPP GetAllBlobNamesOp HSoftmaxSearch HasElements HasScope
HeatmapMaxKeypoint Histogram HuffmanTreeHierarchyOp IDEEPCreateBlobsQueueOp
IDEEPSafeEnqueueBlobsOp IndexFreeze IndexHash IndexLoad IndexSize IndexStore IsEmpty
IsMemberOf LE LT Lars LastNWindowCollector LengthsGather LengthsToSegmentIds
LengthsToShape LogFatal ModOp MomentumSGD MomentumSGDUpdate MultiClassAccuracy
NCCLAllGather NCCLAllreduce NCCLBroadcast NCCLReduce NCCLReduceScatter NE Not Or
PackRecords PackedFC Perplexity PiecewiseLinearTransform Print QuantDecompZstd Quantile
RMACRegions ReadNextBatch ReadRandomBatch ReceiveTensor RecurrentNetworkBlobFetcher
Reduce ReduceScatter RemoveDataBlocks ReplaceNaN ReservoirSampling ResetCounter
ResetCursor ResizeLike RetrieveCount RmsProp RowWiseCounter RowWiseSparseAdagrad
RowWiseSparseAdam Save Scatter ScatterAssign ScatterWeightedSum
SegmentIdsToLengthWeights SegmentIdsToLengths SegmentIdsToRanges SelfBinningHistogram
SendTensor Shape Sign Snapshot SparseAdadelta SparseAdagrad SparseAdam SparseFtrl
SparseLpNorm SparseMatrixReshape SparseMomentumSGDUpdate SparseNormalize SparseStorm
SparseWngrad Storm StringEndsWith StringEquals StringJoin StringPrefix StringStartsWith
StringSuffix SumElementsInt Summarize TensorVectorSize ThrowChildThreadException
ThrowException UnPackRecords Unique UnsafeCoalesce WallClockTime WeightScale
WeightedMultiSample WeightedSample Where Wngrad Xor YellowFin
"""

#: 5 op types: Caffe2 status ``not_implemented``.
_NOT_IMPLEMENTED = """
BatchBoxCox Ceil Floor LengthsSplit TT
"""

_STATUS_OF_LIST = {
    GradientStatus.GRADIENT: _DIFFERENTIATED,
    GradientStatus.NO_GRADIENT: _NO_GRADIENT,
    GradientStatus.SHOULD_NOT_DIFFERENTIATE: _SHOULD_NOT_DIFFERENTIATE,
    GradientStatus.NOT_IMPLEMENTED: _NOT_IMPLEMENTED,
}

#: op type -> the gradient status Caffe2 registers for it (550 types).
CAFFE2_STATUS: dict[str, GradientStatus] = {
    name: status for status, names in _STATUS_OF_LIST.items() for name in names.split()
}

_DOCS = {
    GradientStatus.NO_GRADIENT: "Caffe2 op without a gradient: the backward pass stops here.",
    GradientStatus.SHOULD_NOT_DIFFERENTIATE: (
        "Caffe2 op that must not be differentiated: an error if a gradient reaches it."
    ),
    GradientStatus.NOT_IMPLEMENTED: "Caffe2 registers its gradient as not implemented yet.",
    GradientStatus.NOT_IMPLEMENTED_IN_NETGRAD: (
        "Caffe2 op with a gradient that netgrad does not differentiate yet."
    ),
}


def apply_caffe2_statuses() -> None:
    """Give every Caffe2 op type its status in the registry (idempotent; see module doc).

    * Caffe2 ``gradient`` and a netgrad maker registered: ``gradient`` (unchanged);
    * Caffe2 ``gradient`` and no maker: ``not_implemented_in_netgrad`` (kernel kept);
    * any other Caffe2 status: taken over unless a netgrad maker exists for the type (then
      the status test, ``tests/core/test_caffe2_statuses.py``, reports the disagreement).
      A type netgrad only knew as a gradient op (``ResizeLike``) gets its forward status.
    """
    for name, status in CAFFE2_STATUS.items():
        e = REGISTRY.get(name)
        if e is not None and e.maker is not None:
            continue
        if status is GradientStatus.GRADIENT:
            status = GradientStatus.NOT_IMPLEMENTED_IN_NETGRAD
        e = register_op(name, status=status)
        if not e.doc:
            e.doc = _DOCS[status]


def differentiable_count() -> int:
    """How many of Caffe2's op types netgrad differentiates (status ``gradient``)."""
    return sum(
        1
        for name in CAFFE2_STATUS
        if (e := REGISTRY.get(name)) is not None and e.status is GradientStatus.GRADIENT
    )
