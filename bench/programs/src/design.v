// A small synthesizable design for the yosys and nextpnr-ice40 benchmarks: NCPU tiny 16-bit
// accumulator CPUs (each with 2^RBITS registers) running a program from a ROM, a CRC-16
// unit, an LFSR, an adder chain and a UART transmitter. Written for this benchmark set; it
// does nothing useful. synth.ys uses NCPU=3, ice40.ys uses RBITS=1.
module cpu #(parameter RBITS = 3) (
    input  wire        clk,
    input  wire        rst,
    input  wire [7:0]  din,
    output reg  [15:0] acc,
    output wire [7:0]  pc_out
);
    reg [7:0]  pc;
    reg [15:0] regs [0:(1 << RBITS) - 1];
    reg [15:0] insn;
    assign pc_out = pc;

    always @(*) begin
        case (pc[4:0])
            5'd0:  insn = 16'h1001; 5'd1:  insn = 16'h2102; 5'd2:  insn = 16'h3203;
            5'd3:  insn = 16'h4304; 5'd4:  insn = 16'h5405; 5'd5:  insn = 16'h6506;
            5'd6:  insn = 16'h7607; 5'd7:  insn = 16'h8710; 5'd8:  insn = 16'h1111;
            5'd9:  insn = 16'h2212; 5'd10: insn = 16'h3313; 5'd11: insn = 16'h4414;
            5'd12: insn = 16'h5515; 5'd13: insn = 16'h6616; 5'd14: insn = 16'h7717;
            5'd15: insn = 16'h9000; 5'd16: insn = 16'ha001; 5'd17: insn = 16'hb102;
            5'd18: insn = 16'hc203; 5'd19: insn = 16'hd304; 5'd20: insn = 16'he405;
            default: insn = 16'hf000;
        endcase
    end

    wire [3:0]  op  = insn[15:12];
    wire [RBITS-1:0] rd = insn[8 +: RBITS];
    wire [7:0]  imm = insn[7:0];
    wire [15:0] r   = regs[rd];

    always @(posedge clk) begin
        if (rst) begin
            pc  <= 8'd0;
            acc <= 16'd0;
        end else begin
            pc <= pc + 8'd1;
            case (op)
                4'h1: acc <= acc + {8'd0, imm};
                4'h2: acc <= acc - r;
                4'h3: acc <= acc ^ r;
                4'h4: acc <= acc & (r | {8'd0, din});
                4'h5: acc <= acc | {din, imm};
                4'h6: acc <= {acc[14:0], acc[15]};
                4'h7: acc <= acc >> imm[3:0];
                4'h8: regs[rd] <= acc;
                4'h9: acc <= (acc < r) ? r : acc;
                4'ha: if (acc == r) pc <= {3'd0, imm[4:0]};
                4'hb: acc <= acc + r + {15'd0, acc[0]};
                4'hc: regs[rd] <= regs[rd] + {8'd0, din};
                4'hd: acc <= {acc[7:0], acc[15:8]};
                4'he: acc <= acc + {din, din};
                default: pc <= 8'd0;
            endcase
        end
    end
endmodule

module crc16 (
    input  wire       clk,
    input  wire       rst,
    input  wire       valid,
    input  wire [7:0] data,
    output reg [15:0] crc
);
    integer i;
    reg [15:0] c;
    always @(*) begin
        c = crc;
        for (i = 0; i < 8; i = i + 1)
            c = (c[15] ^ data[7 - i]) ? ({c[14:0], 1'b0} ^ 16'h1021) : {c[14:0], 1'b0};
    end
    always @(posedge clk)
        if (rst) crc <= 16'hffff;
        else if (valid) crc <= c;
endmodule

module uart_tx #(parameter DIV = 217) (
    input  wire       clk,
    input  wire       rst,
    input  wire       start,
    input  wire [7:0] data,
    output reg        tx,
    output wire       busy
);
    reg [7:0] count;
    reg [3:0] bitn;
    reg [9:0] shift;
    assign busy = bitn != 4'd0;
    always @(posedge clk) begin
        if (rst) begin
            tx <= 1'b1; bitn <= 4'd0; count <= 8'd0; shift <= 10'h3ff;
        end else if (!busy) begin
            if (start) begin shift <= {1'b1, data, 1'b0}; bitn <= 4'd10; count <= 8'd0; end
        end else if (count == DIV - 1) begin
            count <= 8'd0; tx <= shift[0]; shift <= {1'b1, shift[9:1]}; bitn <= bitn - 4'd1;
        end else begin
            count <= count + 8'd1;
        end
    end
endmodule

module top #(parameter NCPU = 1, parameter RBITS = 3) (
    input  wire       clk,
    input  wire       rst,
    input  wire [7:0] din,
    input  wire       valid,
    output wire       tx,
    output wire [7:0] leds
);
    wire [15:0] crc;
    wire [15:0] acc [0:NCPU];
    wire [7:0]  pc  [0:NCPU];
    reg  [15:0] lfsr;
    reg  [15:0] sum;
    wire        busy;

    assign acc[0] = 16'd0;
    assign pc[0]  = 8'd0;
    genvar g;
    generate
        for (g = 0; g < NCPU; g = g + 1) begin : core
            localparam [7:0] K = g;
            wire [15:0] a;
            wire [7:0]  p;
            cpu #(.RBITS(RBITS)) u_cpu (.clk(clk), .rst(rst), .din(din ^ lfsr[7:0] ^ K),
                                        .acc(a), .pc_out(p));
            assign acc[g + 1] = acc[g] ^ a;
            assign pc[g + 1]  = pc[g] + p;
        end
    endgenerate

    crc16   u_crc (.clk(clk), .rst(rst), .valid(valid), .data(din), .crc(crc));
    uart_tx u_tx  (.clk(clk), .rst(rst), .start(valid & ~busy), .data(acc[NCPU][7:0] ^ crc[7:0]),
                   .tx(tx), .busy(busy));

    always @(posedge clk) begin
        if (rst) lfsr <= 16'hace1;
        else lfsr <= {lfsr[14:0], lfsr[15] ^ lfsr[13] ^ lfsr[12] ^ lfsr[10]};
        sum <= {din, lfsr[15:8]} + sum;
    end

    assign leds = acc[NCPU][15:8] ^ crc[15:8] ^ sum[15:8] ^ pc[NCPU];
endmodule
