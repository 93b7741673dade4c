from kafka_mirror.cli import main

main()
