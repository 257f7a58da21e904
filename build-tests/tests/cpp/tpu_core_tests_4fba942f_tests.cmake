add_test([=[ProtoWriter.VarintsUseSevenBitGroups]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=ProtoWriter.VarintsUseSevenBitGroups]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[ProtoWriter.VarintsUseSevenBitGroups]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_protobuf.cpp:19]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[ProtoWriter.NegativeIntsAreTenBytes]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=ProtoWriter.NegativeIntsAreTenBytes]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[ProtoWriter.NegativeIntsAreTenBytes]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_protobuf.cpp:25]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[ProtoWriter.LengthDelimitedFields]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=ProtoWriter.LengthDelimitedFields]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[ProtoWriter.LengthDelimitedFields]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_protobuf.cpp:31]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[CompileOptions.DefaultIsOneReplicaOnePartition]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=CompileOptions.DefaultIsOneReplicaOnePartition]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[CompileOptions.DefaultIsOneReplicaOnePartition]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_protobuf.cpp:40]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[CompileOptions.PortableAndOptimizationLevel]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=CompileOptions.PortableAndOptimizationLevel]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[CompileOptions.PortableAndOptimizationLevel]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_protobuf.cpp:45]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Types.MlirSpelling]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Types.MlirSpelling]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Types.MlirSpelling]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_builder.cpp:9]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Builder.GoldenModule]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Builder.GoldenModule]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Builder.GoldenModule]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_builder.cpp:18]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Builder.ConstantsAreExact]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Builder.ConstantsAreExact]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Builder.ConstantsAreExact]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_builder.cpp:38]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Builder.ReductionRegion]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Builder.ReductionRegion]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Builder.ReductionRegion]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_builder.cpp:49]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Builder.ShapeInference]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Builder.ShapeInference]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Builder.ShapeInference]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_builder.cpp:60]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Builder.ChecksOperands]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Builder.ChecksOperands]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Builder.ChecksOperands]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_builder.cpp:76]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Builder.ReferencesSurviveGrowth]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Builder.ReferencesSurviveGrowth]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Builder.ReferencesSurviveGrowth]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_builder.cpp:87]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Plugin.ReportsVersionAndDevices]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Plugin.ReportsVersionAndDevices]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Plugin.ReportsVersionAndDevices]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_runtime.cpp:21]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Plugin.MissingFileIsAClearError]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Plugin.MissingFileIsAClearError]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Plugin.MissingFileIsAClearError]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_runtime.cpp:30]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Plugin.NonPluginFileIsAClearError]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Plugin.NonPluginFileIsAClearError]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Plugin.NonPluginFileIsAClearError]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_runtime.cpp:42]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Runtime.CompilesAndRuns]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Runtime.CompilesAndRuns]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Runtime.CompilesAndRuns]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_runtime.cpp:51]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Runtime.ErrorsNameTheCallAndCarryTheMessage]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Runtime.ErrorsNameTheCallAndCarryTheMessage]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Runtime.ErrorsNameTheCallAndCarryTheMessage]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_runtime.cpp:71]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Runtime.HostRoundTripOfEveryType]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Runtime.HostRoundTripOfEveryType]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Runtime.HostRoundTripOfEveryType]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_runtime.cpp:83]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[ExecutableCache.HitsInMemoryAndOnDisk]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=ExecutableCache.HitsInMemoryAndOnDisk]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[ExecutableCache.HitsInMemoryAndOnDisk]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_runtime.cpp:102]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s4_8_st8_1_off0_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s4_8_st8_1_off0_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s4_8_st8_1_off0_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s4_8_st8_1_off0_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s4_8_st8_1_off0_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s4_8_st8_1_off0_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s3_5_st8_1_off9_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s3_5_st8_1_off9_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s3_5_st8_1_off9_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s3_5_st8_1_off9_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s3_5_st8_1_off9_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s3_5_st8_1_off9_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s8_4_st1_8_off0_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s8_4_st1_8_off0_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s8_4_st1_8_off0_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s8_4_st1_8_off0_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s8_4_st1_8_off0_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s8_4_st1_8_off0_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s2_3_4_st1_2_6_off3_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s2_3_4_st1_2_6_off3_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s2_3_4_st1_2_6_off3_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s2_3_4_st1_2_6_off3_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s2_3_4_st1_2_6_off3_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s2_3_4_st1_2_6_off3_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s5_st9_off2_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s5_st9_off2_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s5_st9_off2_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s5_st9_off2_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s5_st9_off2_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s5_st9_off2_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s3_4_st0_2_off1_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s3_4_st0_2_off1_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s3_4_st0_2_off1_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s3_4_st0_2_off1_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s3_4_st0_2_off1_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s3_4_st0_2_off1_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s3_3_st1_1_off0_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s3_3_st1_1_off0_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s3_3_st1_1_off0_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s3_3_st1_1_off0_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s3_3_st1_1_off0_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s3_3_st1_1_off0_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s4_3_st5_3_off1_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s4_3_st5_3_off1_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s4_3_st5_3_off1_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s4_3_st5_3_off1_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s4_3_st5_3_off1_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s4_3_st5_3_off1_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s1_5_1_st100_3_7_off4_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s1_5_1_st100_3_7_off4_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s1_5_1_st100_3_7_off4_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s1_5_1_st100_3_7_off4_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s1_5_1_st100_3_7_off4_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s1_5_1_st100_3_7_off4_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s0_3_st3_1_off0_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s0_3_st3_1_off0_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s0_3_st3_1_off0_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/s0_3_st3_1_off0_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/s0_3_st3_1_off0_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/s0_3_st3_1_off0_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/sstoff17_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/sstoff17_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/sstoff17_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.ReadMatchesHost/sstoff17_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.ReadMatchesHost/sstoff17_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.ReadMatchesHost/sstoff17_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:67]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s4_8_st8_1_off0_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s4_8_st8_1_off0_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s4_8_st8_1_off0_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s4_8_st8_1_off0_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s4_8_st8_1_off0_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s4_8_st8_1_off0_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s3_5_st8_1_off9_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s3_5_st8_1_off9_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s3_5_st8_1_off9_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s3_5_st8_1_off9_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s3_5_st8_1_off9_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s3_5_st8_1_off9_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s8_4_st1_8_off0_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s8_4_st1_8_off0_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s8_4_st1_8_off0_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s8_4_st1_8_off0_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s8_4_st1_8_off0_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s8_4_st1_8_off0_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s2_3_4_st1_2_6_off3_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s2_3_4_st1_2_6_off3_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s2_3_4_st1_2_6_off3_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s2_3_4_st1_2_6_off3_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s2_3_4_st1_2_6_off3_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s2_3_4_st1_2_6_off3_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s5_st9_off2_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s5_st9_off2_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s5_st9_off2_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s5_st9_off2_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s5_st9_off2_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s5_st9_off2_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s3_4_st0_2_off1_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s3_4_st0_2_off1_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s3_4_st0_2_off1_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s3_4_st0_2_off1_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s3_4_st0_2_off1_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s3_4_st0_2_off1_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s3_3_st1_1_off0_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s3_3_st1_1_off0_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s3_3_st1_1_off0_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s3_3_st1_1_off0_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s3_3_st1_1_off0_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s3_3_st1_1_off0_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s4_3_st5_3_off1_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s4_3_st5_3_off1_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s4_3_st5_3_off1_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s4_3_st5_3_off1_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s4_3_st5_3_off1_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s4_3_st5_3_off1_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s1_5_1_st100_3_7_off4_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s1_5_1_st100_3_7_off4_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s1_5_1_st100_3_7_off4_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s1_5_1_st100_3_7_off4_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s1_5_1_st100_3_7_off4_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s1_5_1_st100_3_7_off4_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s0_3_st3_1_off0_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s0_3_st3_1_off0_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s0_3_st3_1_off0_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/s0_3_st3_1_off0_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/s0_3_st3_1_off0_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/s0_3_st3_1_off0_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/sstoff17_static]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/sstoff17_static]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/sstoff17_static]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
add_test([=[Views/StridedTest.WriteMatchesHost/sstoff17_dynamic]=]  /work/main/build-tests/tests/cpp/tpu_core_tests [==[--gtest_filter=Views/StridedTest.WriteMatchesHost/sstoff17_dynamic]==] --gtest_also_run_disabled_tests)
set_tests_properties([=[Views/StridedTest.WriteMatchesHost/sstoff17_dynamic]=]
  PROPERTIES
    
    DEF_SOURCE_LINE [==[/work/main/tests/cpp/test_strided.cpp:84]==]
    WORKING_DIRECTORY [==[/work/main/build-tests/tests/cpp]==]
    SKIP_REGULAR_EXPRESSION [==[\[  SKIPPED \]]==]
    
)
set(tpu_core_tests_TESTS [==[ProtoWriter.VarintsUseSevenBitGroups]==] [==[ProtoWriter.NegativeIntsAreTenBytes]==] [==[ProtoWriter.LengthDelimitedFields]==] [==[CompileOptions.DefaultIsOneReplicaOnePartition]==] [==[CompileOptions.PortableAndOptimizationLevel]==] [==[Types.MlirSpelling]==] [==[Builder.GoldenModule]==] [==[Builder.ConstantsAreExact]==] [==[Builder.ReductionRegion]==] [==[Builder.ShapeInference]==] [==[Builder.ChecksOperands]==] [==[Builder.ReferencesSurviveGrowth]==] [==[Plugin.ReportsVersionAndDevices]==] [==[Plugin.MissingFileIsAClearError]==] [==[Plugin.NonPluginFileIsAClearError]==] [==[Runtime.CompilesAndRuns]==] [==[Runtime.ErrorsNameTheCallAndCarryTheMessage]==] [==[Runtime.HostRoundTripOfEveryType]==] [==[ExecutableCache.HitsInMemoryAndOnDisk]==] [==[Views/StridedTest.ReadMatchesHost/s4_8_st8_1_off0_static]==] [==[Views/StridedTest.ReadMatchesHost/s4_8_st8_1_off0_dynamic]==] [==[Views/StridedTest.ReadMatchesHost/s3_5_st8_1_off9_static]==] [==[Views/StridedTest.ReadMatchesHost/s3_5_st8_1_off9_dynamic]==] [==[Views/StridedTest.ReadMatchesHost/s8_4_st1_8_off0_static]==] [==[Views/StridedTest.ReadMatchesHost/s8_4_st1_8_off0_dynamic]==] [==[Views/StridedTest.ReadMatchesHost/s2_3_4_st1_2_6_off3_static]==] [==[Views/StridedTest.ReadMatchesHost/s2_3_4_st1_2_6_off3_dynamic]==] [==[Views/StridedTest.ReadMatchesHost/s5_st9_off2_static]==] [==[Views/StridedTest.ReadMatchesHost/s5_st9_off2_dynamic]==] [==[Views/StridedTest.ReadMatchesHost/s3_4_st0_2_off1_static]==] [==[Views/StridedTest.ReadMatchesHost/s3_4_st0_2_off1_dynamic]==] [==[Views/StridedTest.ReadMatchesHost/s3_3_st1_1_off0_static]==] [==[Views/StridedTest.ReadMatchesHost/s3_3_st1_1_off0_dynamic]==] [==[Views/StridedTest.ReadMatchesHost/s4_3_st5_3_off1_static]==] [==[Views/StridedTest.ReadMatchesHost/s4_3_st5_3_off1_dynamic]==] [==[Views/StridedTest.ReadMatchesHost/s1_5_1_st100_3_7_off4_static]==] [==[Views/StridedTest.ReadMatchesHost/s1_5_1_st100_3_7_off4_dynamic]==] [==[Views/StridedTest.ReadMatchesHost/s0_3_st3_1_off0_static]==] [==[Views/StridedTest.ReadMatchesHost/s0_3_st3_1_off0_dynamic]==] [==[Views/StridedTest.ReadMatchesHost/sstoff17_static]==] [==[Views/StridedTest.ReadMatchesHost/sstoff17_dynamic]==] [==[Views/StridedTest.WriteMatchesHost/s4_8_st8_1_off0_static]==] [==[Views/StridedTest.WriteMatchesHost/s4_8_st8_1_off0_dynamic]==] [==[Views/StridedTest.WriteMatchesHost/s3_5_st8_1_off9_static]==] [==[Views/StridedTest.WriteMatchesHost/s3_5_st8_1_off9_dynamic]==] [==[Views/StridedTest.WriteMatchesHost/s8_4_st1_8_off0_static]==] [==[Views/StridedTest.WriteMatchesHost/s8_4_st1_8_off0_dynamic]==] [==[Views/StridedTest.WriteMatchesHost/s2_3_4_st1_2_6_off3_static]==] [==[Views/StridedTest.WriteMatchesHost/s2_3_4_st1_2_6_off3_dynamic]==] [==[Views/StridedTest.WriteMatchesHost/s5_st9_off2_static]==] [==[Views/StridedTest.WriteMatchesHost/s5_st9_off2_dynamic]==] [==[Views/StridedTest.WriteMatchesHost/s3_4_st0_2_off1_static]==] [==[Views/StridedTest.WriteMatchesHost/s3_4_st0_2_off1_dynamic]==] [==[Views/StridedTest.WriteMatchesHost/s3_3_st1_1_off0_static]==] [==[Views/StridedTest.WriteMatchesHost/s3_3_st1_1_off0_dynamic]==] [==[Views/StridedTest.WriteMatchesHost/s4_3_st5_3_off1_static]==] [==[Views/StridedTest.WriteMatchesHost/s4_3_st5_3_off1_dynamic]==] [==[Views/StridedTest.WriteMatchesHost/s1_5_1_st100_3_7_off4_static]==] [==[Views/StridedTest.WriteMatchesHost/s1_5_1_st100_3_7_off4_dynamic]==] [==[Views/StridedTest.WriteMatchesHost/s0_3_st3_1_off0_static]==] [==[Views/StridedTest.WriteMatchesHost/s0_3_st3_1_off0_dynamic]==] [==[Views/StridedTest.WriteMatchesHost/sstoff17_static]==] [==[Views/StridedTest.WriteMatchesHost/sstoff17_dynamic]==])
